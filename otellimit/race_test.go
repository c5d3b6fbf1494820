//go:build race

package otellimit_test

const raceEnabled = true
