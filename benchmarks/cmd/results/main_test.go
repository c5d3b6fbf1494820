package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A benchstat CSV in the shape of `benchstat -col /lib -format csv`: keyrate,
// keyrate-coarse, then two peers, three rows.
const allowCSV = `goos: linux
,keyrate,,keyrate-coarse,,,,xrate,,,,golimiter,,,
,sec/op,CI,sec/op,CI,vs base,P,sec/op,CI,vs base,P,sec/op,CI,vs base,P
Allow/work=serial-hot/path=deny,1e-07,∞,5e-08,∞,-50%,p=0.008 n=5,1.2e-07,∞,+20%,p=0.008 n=5,9e-08,∞,-10%,p=0.008 n=5
Allow/work=parallel-10k/path=deny,8e-08,∞,4e-08,∞,-50%,p=0.008 n=5,1.6e-07,∞,+100%,p=0.008 n=5,2.4e-07,∞,+200%,p=0.008 n=5
Allow/work=parallel-10k/path=deny-2,4e-08,∞,2.5e-08,∞,-37%,p=0.008 n=5,8e-08,∞,+100%,p=0.008 n=5,2.4e-07,∞,+500%,p=0.008 n=5
geomean,1e-07,,5e-08,,,,1e-07,,,,1e-07,,,
`

func TestLeadIsOverPeersOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allow.csv")
	if err := os.WriteFile(path, []byte(allowCSV), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := write(&out, path, "", "", "test", 5); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"| workload | path | cpu | keyrate | keyrate-coarse | xrate | golimiter | fastest peer | lead | lead (coarse) |",
		// keyrate-coarse is faster than every peer but is not the fastest
		// peer; lead is golimiter over keyrate, lead (coarse) golimiter over
		// keyrate-coarse.
		"| serial-hot | deny | 1 | **100** | **50.0** | 120 (1.20) | 90.0 (0.90) | golimiter | 0.90 ✗ | 1.80 |",
		"| parallel-10k | deny | 1 | **80.0** | **40.0** | 160 (2.00) | 240 (3.00) | xrate | 2.00 | 4.00 |",
		"keyrate below the 1.5x goal: serial-hot/deny/cpu=1 (0.90x vs golimiter).",
		"keyrate-coarse meets the 1.5x goal on every row.",
		"| deny | 80.0 → 40.0 (2.00x) | 40.0 → 25.0 (1.60x) | 160 → 80.0 (2.00x) | 240 → 240 (1.00x) |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q; got:\n%s", want, got)
		}
	}
}

func TestKeyrateMustBeTheFirstColumn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allow.csv")
	csv := strings.ReplaceAll(allowCSV, ",keyrate,,keyrate-coarse,", ",other,,keyrate-coarse,")
	if err := os.WriteFile(path, []byte(csv), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := write(&strings.Builder{}, path, "", "", "test", 5); err == nil {
		t.Fatal("accepted a table whose first column is not keyrate")
	}
}
