package httplimit

import (
	"net/http"
	"strings"
	"testing"
)

// Values made in a block's bytes stay as they were when more is written
// after them, also once the bytes outgrow the block and move to the heap,
// and each field's slice has capacity 1, so that another middleware's
// append copies instead of writing over the next field.
func TestFieldsValuesOutliveGrowth(t *testing.T) {
	for _, r := range []room{{2, 32}, {2, 48}, {2, 96}, {6, 288}, {8, 384}, {16, 768}, {20, 1000}} {
		f := newFields(r)
		h := make(http.Header)
		var want []string
		for i := range 3 * r.vals {
			start := len(f.buf)
			f.buf = append(f.buf, strings.Repeat(string(rune('a'+i%26)), 40)...)
			v := f.value(start)
			k := "F" + f.int(int64(i))
			f.set(h, k, v)
			want = append(want, k, v)
		}
		h.Add("F0", "another")
		for i := 0; i < len(want); i += 2 {
			k, v := want[i], want[i+1]
			if got := h[k][0]; got != v || len(got) != 40 || strings.Count(got, got[:1]) != 40 {
				t.Fatalf("room %v: field %s is %q, want %q", r, k, got, v)
			}
		}
		if got := h["F0"]; len(got) != 2 || got[1] != "another" || h["F1"][0] != want[3] {
			t.Fatalf("room %v: after an append to F0: F0 %q, F1 %q", r, got, h["F1"])
		}
		if f.value(len(f.buf)) != "" {
			t.Fatalf("room %v: an empty value is %q", r, f.value(len(f.buf)))
		}
	}
}
