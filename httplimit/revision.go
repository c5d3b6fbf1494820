package httplimit

import "github.com/keyrate/keyrate/ratelimitfield"

// WithFieldRevision chooses the parameters of the RateLimit field (see
// DraftHeaders): ratelimitfield.Draft10's r and t, the default, or
// ratelimitfield.Proposal166's a, w and c, the request's weight when it
// was admitted (0 for a refusal, which consumes nothing). RateLimit-Policy
// is the same in both. Move to another revision once the clients read it;
// grpclimit.WithFieldRevision does the same for its metadata. An unknown
// revision gives New an error wrapping keyrate.ErrConfig.
func WithFieldRevision(v ratelimitfield.Revision) Option {
	return func(c *config) { c.revision = v }
}
