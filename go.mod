module github.com/keyrate/keyrate

go 1.26

require (
	github.com/puzpuzpuz/xsync/v3 v3.5.1
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	pgregory.net/rapid v1.3.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
