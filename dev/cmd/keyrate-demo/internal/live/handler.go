package live

import (
	"embed"
	"encoding/json"
	"errors"
	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"net/http"
	"strconv"
	"time"
)

//go:embed page
var pageFiles embed.FS

// The paths Handler serves. The page fetches ConfigPath and EventsPath
// itself, so Handler must be mounted at the server's root paths, for
// example on "GET /{$}" and "GET /live/" of an http.ServeMux.
const (
	PagePath   = "/"
	ConfigPath = "/live/config"
	EventsPath = "/live/events"
	KeyPath    = "/live/key"
)

// assets maps the paths of the page's files to their names and types.
var assets = map[string]struct{ file, contentType string }{
	PagePath:            {"page/index.html", "text/html; charset=utf-8"},
	"/live/app.js":      {"page/app.js", "text/javascript; charset=utf-8"},
	"/live/style.css":   {"page/style.css", "text/css; charset=utf-8"},
	"/live/favicon.svg": {"page/favicon.svg", "image/svg+xml"},
}

// contentSecurity lets the page load nothing from anywhere but this server:
// it works offline, and a key typed into it goes nowhere else.
const contentSecurity = "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page and its files at PagePath and under /live/, the
// route description at ConfigPath, the decision stream at EventsPath, and
// at KeyPath the key decisions are recorded under for the KeyHeader value
// the request carries. Other paths get 404, other methods than GET and
// HEAD 405.
func (h *Hub) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		switch r.URL.Path {
		case EventsPath:
			h.serveEvents(w, r)
		case ConfigPath:
			h.serveConfig(w)
		case KeyPath:
			h.serveKey(w, r)
		default:
			serveAsset(w, r)
		}
	})
}

func serveAsset(w http.ResponseWriter, r *http.Request) {
	a, ok := assets[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	body, err := pageFiles.ReadFile(a.file)
	if err != nil {
		http.Error(w, "page file missing from the build", http.StatusInternalServerError)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", a.contentType)
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Content-Security-Policy", contentSecurity)
	hdr.Set("X-Content-Type-Options", "nosniff")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

// routeJSON is a Route as the page reads it.
type routeJSON struct {
	Name     string       `json:"name"`
	Method   string       `json:"method"`
	Path     string       `json:"path"`
	Policies []policyJSON `json:"policies"`
	// Quotas are the route's calendar policies (a day, a month): the page
	// draws a lane per sliding policy, and lists these with the budgets.
	Quotas  []policyJSON      `json:"quotas,omitempty"`
	Refunds bool              `json:"refunds,omitempty"`
	Unit    string            `json:"unit,omitempty"`
	Burst   int               `json:"burst,omitempty"`
	Form    map[string]string `json:"form,omitempty"`
	Note    string            `json:"note,omitempty"`
}

// policyJSON is a keyrate.Policy as the page reads it: a calendar
// policy's window is its current period's length, and Calendar says which.
type policyJSON struct {
	Name     string  `json:"name"`
	Limit    int     `json:"limit"`
	WindowMs float64 `json:"windowMs"`
	Calendar string  `json:"calendar,omitempty"`
}

// describePolicy returns p as the page reads it at now.
func describePolicy(p keyrate.Policy, now time.Time) policyJSON {
	if p.Calendar == (keyrate.Calendar{}) {
		return policyJSON{Name: p.Name, Limit: p.Limit, WindowMs: millis(p.Window)}
	}
	start, end := backend.Period(p.Calendar, now)
	return policyJSON{Name: p.Name, Limit: p.Limit, WindowMs: millis(end.Sub(start)), Calendar: p.Calendar.String()}
}

type configJSON struct {
	KeyHeader string      `json:"keyHeader"`
	Routes    []routeJSON `json:"routes"`
	Now       float64     `json:"now"`
}

func describe(cfg Config) configJSON {
	c := configJSON{KeyHeader: cfg.KeyHeader}
	for _, r := range cfg.Routes {
		rj := routeJSON{Name: r.Name, Method: r.Method, Path: r.Path, Refunds: r.Refunds, Unit: r.Unit, Burst: r.Burst, Form: r.Form, Note: r.Note}
		for _, p := range r.Policies {
			if p.Calendar == (keyrate.Calendar{}) {
				rj.Policies = append(rj.Policies, describePolicy(p, time.Now()))
			} else {
				rj.Quotas = append(rj.Quotas, describePolicy(p, time.Now()))
			}
		}
		c.Routes = append(c.Routes, rj)
	}
	return c
}

func (h *Hub) serveConfig(w http.ResponseWriter) {
	c := h.routes
	c.Now = unixMillis(time.Now())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(c)
}

// keyJSON is KeyPath's answer.
type keyJSON struct {
	Key string `json:"key"`
}

// serveKey answers with the key the request's KeyHeader value is recorded
// under. The value travels in the header, as with the page's requests to
// the API, never in the URL, where logs would keep it.
func (h *Hub) serveKey(w http.ResponseWriter, r *http.Request) {
	v := r.Header.Get(h.cfg.KeyHeader)
	if v == "" {
		http.Error(w, "send the key in the "+h.cfg.KeyHeader+" header", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(keyJSON{h.cfg.ShowKey(v)})
}

// serveEvents streams decisions as Server-Sent Events until the client goes
// away, a write to it fails or times out, the Hub is closed, the stream is
// MaxStreamAge old, or a newer stream takes its place (see
// Config.MaxSubscribers).
func (h *Hub) serveEvents(w http.ResponseWriter, r *http.Request) {
	lastID, _ := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64)
	s, past, err := h.subscribe(lastID, h.cfg.ClientOf(r))
	if err != nil {
		w.Header().Set("Retry-After", "5")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer h.unsubscribe(s)

	rc := http.NewResponseController(w)
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no") // ask reverse proxies not to buffer the stream
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}

	write := func(frames ...[]byte) error {
		err := rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
		if err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		for _, f := range frames {
			if _, err := w.Write(f); err != nil {
				return err
			}
		}
		return rc.Flush()
	}

	// The retry line asks a browser to reconnect after 2 s if the stream
	// breaks; hello carries the server time for the page's clock.
	hello := append([]byte("retry: 2000\n"), controlFrame("hello", time.Now(), 0)...)
	if err := write(append([][]byte{hello}, past...)...); err != nil {
		return
	}

	tick := time.NewTicker(h.cfg.KeepAlive)
	defer tick.Stop()
	age := time.NewTimer(h.cfg.MaxStreamAge)
	defer age.Stop()
	batch := make([][]byte, 0, 64)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-h.done:
			return
		case <-s.ended: // a newer stream took its place
			return
		case <-age.C: // the browser opens another, resuming where this one ends
			return
		case <-tick.C:
			if err := write(h.notices(s, "tick")...); err != nil {
				return
			}
		case f := <-s.frames:
			// Send whatever else is queued in the same write and flush.
			batch = append(batch[:0], f)
		drain:
			for len(batch) < cap(batch) {
				select {
				case f := <-s.frames:
					batch = append(batch, f)
				default:
					break drain
				}
			}
			if len(s.frames) == 0 {
				batch = append(batch, h.notices(s, "")...)
			}
			if err := write(batch...); err != nil {
				return
			}
		}
	}
}

// notices returns a dropped event if s has missed events since the last
// one, and a control event of the given name if name is not empty.
func (h *Hub) notices(s *subscriber, name string) [][]byte {
	var out [][]byte
	now := time.Now()
	if n := s.dropped.Swap(0); n > 0 {
		out = append(out, controlFrame("dropped", now, n))
	}
	if name != "" {
		out = append(out, controlFrame(name, now, 0))
	}
	return out
}
