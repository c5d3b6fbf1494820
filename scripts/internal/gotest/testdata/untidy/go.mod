module example.com/untidy

go 1.26

require golang.org/x/mod v0.43.0
