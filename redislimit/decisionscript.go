package redislimit

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// script is a decision script, run by a command built by hand: a run's
// command is one slice, filled in place (see runCmd), where go-redis's
// EvalSha would copy the keys and ARGV into another and box the digest
// on every call: three allocations a run, measured in BenchmarkAllow
// (dev/benchcmp).
type script struct {
	*redis.Script // for the tests, which run it on keys and ARGV of their own
	src           string
	sha           any // the digest EVALSHA names, boxed once
}

func newScript(src string) *script {
	s := redis.NewScript(src)
	return &script{Script: s, src: src, sha: s.Hash()}
}

// cmd returns the command of a run whose command is args (see runCmd):
// EVALSHA, or EVAL with the whole script when full is set (after Redis
// answered NOSCRIPT). It writes the first two entries of args.
func (s *script) cmd(ctx context.Context, args []any, full bool) *redis.Cmd {
	if full {
		args[0], args[1] = "eval", s.src
	} else {
		args[0], args[1] = "evalsha", s.sha
	}
	c := redis.NewCmd(ctx, args...)
	c.SetFirstKeyPos(3) // where a Cluster client finds the slot
	return c
}

// run runs the script on c with the command args: by its digest, and by
// its whole source where Redis does not have it cached.
func (s *script) run(ctx context.Context, c redis.UniversalClient, args []any) *redis.Cmd {
	cmd := s.cmd(ctx, args, false)
	if c.Process(ctx, cmd); noScript(cmd.Err()) {
		cmd = s.cmd(ctx, args, true)
		c.Process(ctx, cmd)
	}
	return cmd
}

// noScript reports whether err is Redis saying it does not have a script
// cached.
func noScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
