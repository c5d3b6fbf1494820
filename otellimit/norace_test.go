//go:build !race

package otellimit_test

const raceEnabled = false
