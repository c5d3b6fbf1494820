//go:build race

package keyrate

func init() { raceDetector = true }
