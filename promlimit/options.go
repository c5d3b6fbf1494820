package promlimit

// Option configures Metrics; pass options to New.
type Option func(*config)

type config struct {
	maxRoutes int
}

// defaultMaxRoutes bounds the routes with series of their own unless
// WithMaxRoutes says otherwise. A route has a few dozen series, most of
// them its duration histogram's buckets: 1000 routes keep a scrape in the
// tens of thousands of series.
const defaultMaxRoutes = 1000

// WithMaxRoutes bounds the routes that get series of their own. Routes come
// from the middleware at run time, and grpclimit's are method names, which
// a client chooses behind grpc.UnknownServiceHandler; past the bound,
// further routes are counted under route="(other)", so that no client can
// grow the series without end. Default: 1000; a route has a few dozen
// series, most of them the duration histogram's buckets. Raise it for a
// program with more routes. Must be at least 1.
func WithMaxRoutes(n int) Option { return func(c *config) { c.maxRoutes = n } }
