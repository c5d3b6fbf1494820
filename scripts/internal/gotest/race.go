package gotest

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
)

// Race says whether go test can use the race detector here, and if not,
// why: it needs cgo, and cgo needs a C compiler. The go command turns cgo
// off by itself when it finds no compiler, so both are read from go env.
func Race(ctx context.Context) (ok bool, why string, err error) {
	out, err := exec.CommandContext(ctx, "go", "env", "-json", "CGO_ENABLED", "CC").Output()
	if err != nil {
		return false, "", fmt.Errorf("go env: %w", err)
	}
	var env struct{ CGO_ENABLED, CC string }
	if err := json.Unmarshal(out, &env); err != nil {
		return false, "", fmt.Errorf("go env: %w", err)
	}
	ok, why = raceFrom(env.CGO_ENABLED, env.CC, exec.LookPath)
	return ok, why, nil
}

func raceFrom(cgo, cc string, lookPath func(string) (string, error)) (bool, string) {
	compiler := strings.Fields(cc)
	if len(compiler) == 0 {
		compiler = []string{"gcc"}
	}
	if _, err := lookPath(compiler[0]); err != nil {
		return false, fmt.Sprintf("no C compiler: %s not found, and -race needs cgo (install one, for example: apt-get install -y gcc)", compiler[0])
	}
	if cgo != "1" {
		return false, "cgo is off (CGO_ENABLED=" + cgo + "), and -race needs cgo"
	}
	return true, ""
}
