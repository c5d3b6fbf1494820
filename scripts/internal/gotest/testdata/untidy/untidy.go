package untidy
