package otellimit

// Option configures Metrics; pass options to New.
type Option func(*config)

type config struct {
	maxRoutes int
}

// defaultMaxRoutes keeps each instrument's series under the SDK's default
// cardinality limit of 2000 per instrument: a route has 5 series of
// keyrate.requests and of keyrate.backend.errors, and 300 routes and
// "(other)" make 1505.
const defaultMaxRoutes = 300

// WithMaxRoutes bounds the routes that get series of their own. Routes come
// from the middleware at run time, and grpclimit's are method names, which
// a client chooses behind grpc.UnknownServiceHandler; past the bound,
// further routes are counted under keyrate.route="(other)", so that no
// client can grow the series without end. Default: 300, which keeps every
// instrument within the SDK's default cardinality limit (2000 series per
// instrument: 5 per route of keyrate.requests). Raise it together with the
// SDK's limit (sdkmetric.WithCardinalityLimit) for a program with more
// routes. Must be at least 1.
func WithMaxRoutes(n int) Option { return func(c *config) { c.maxRoutes = n } }
