module github.com/keyrate/keyrate/cmd/keyrate-demo

go 1.26

require github.com/keyrate/keyrate v0.1.0

require github.com/puzpuzpuz/xsync/v3 v3.5.1 // indirect

replace github.com/keyrate/keyrate => ../../
