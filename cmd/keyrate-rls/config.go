package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// ruleSet is one loaded configuration: each domain's tree of descriptors.
// It is immutable once built; a reload builds another and swaps it in.
type ruleSet struct {
	domains map[string]*node
	rules   []*rule // every rule, in the order of the file
	// none marks the rules of a service whose configuration was invalid
	// at start: as envoyproxy/ratelimit, it answers every call with an
	// error until a valid one loads.
	none bool
}

// noRules is the rule set of a service that has loaded no configuration.
func noRules() *ruleSet { return &ruleSet{domains: map[string]*node{}, none: true} }

// minMaxWindow is the longest window the in-process store always holds: a
// day, the longest unit but for week, month and year. Its events count in
// ticks of 50µs. A configuration with a longer window at start-up gets
// coarser ticks (20ms for a year), and a reload or a limit override of a
// longer window than the store was started with is refused (see
// keyrate.WithMaxWindow).
const minMaxWindow = 24 * time.Hour

// maxWindow returns the longest window the in-process store must hold for
// rs: its longest rule's, or minMaxWindow.
func (rs *ruleSet) maxWindow() time.Duration {
	w := minMaxWindow
	for _, r := range rs.rules {
		for _, l := range r.limits {
			w = max(w, l.window)
		}
	}
	return w
}

// node is one descriptor of the configuration: a key, with a value or not,
// and what lies beneath it.
type node struct {
	children  map[entry]*node // by key and value; value "" for a key without one
	wildcards []wildcard      // the children whose value holds a '*', in file order
	rule      *rule           // nil: no rate limit here
	// perValue says that requests matched here keep a budget per value: a
	// key without a value, or a wildcard value without share_threshold. A
	// value written out in full is the same for every request it matches.
	perValue bool
	// file and line are where the descriptor is written, for the error
	// of a duplicate.
	file string
	line int
}

// entry is a descriptor entry: a key and a value.
type entry struct{ key, value string }

// wildcard is a child whose value is a pattern: each '*' matches any run
// of characters, the rest matches itself.
type wildcard struct {
	key   string
	parts []string // the value split at each '*'
	node  *node
}

// rule is a rate limit of the configuration: a descriptor's rate_limit
// (or rate_limits) block and how it applies.
type rule struct {
	domain string
	// path identifies the rule across reloads: its domain and every key
	// and value from the root down. A rule that keeps its path keeps its
	// tier, and so its counts.
	path string
	// stat names the rule in metrics as envoyproxy/ratelimit names it in
	// its stats: the keys from the root, each with its configured value
	// ("message_type_marketing.to_number"). It holds no value a request
	// sent.
	stat string
	file string
	line int
	// limits are the rule's limits, decided together (keyrate's policies);
	// empty when unlimited.
	limits    []limit
	unlimited bool
	shadow    bool
	// quota is quota_mode: the request is refused by this rule only when
	// every quota rule of the request is over its limit (see
	// service.refuses).
	quota    bool
	replaces []string
	// metadata is the descriptor's metadata, which RESPONSE_DYNAMIC_METADATA
	// returns for the rules a request passed; nil for none.
	metadata *structpb.Struct
	// blocked reports a limit of 0 requests per unit: every request is
	// over it, and the store is never asked.
	blocked bool
	// tier is the name of the rule's tier in the store, which keys of the
	// rule start with. The service sets it when it loads the rule set.
	tier string
}

// limit is one limit of a rule.
type limit struct {
	name    string
	perUnit int           // requests_per_unit, 0 to math.MaxInt32
	window  time.Duration // unit (times multiplier) or window
	// unit and multiplier are what current_limit reports: the configured
	// unit, or for a window the largest unit it is a whole number of (see
	// unitOf). multiplier 1 is not sent.
	unit       rlspb.RateLimitResponse_RateLimit_Unit
	multiplier uint32
}

// policies returns the rule's limits as keyrate policies, for its tier.
func (r *rule) policies() []keyrate.Policy {
	ps := make([]keyrate.Policy, len(r.limits))
	for i, l := range r.limits {
		ps[i] = keyrate.Policy{Name: l.name, Limit: l.perUnit, Window: l.window}
	}
	return ps
}

// named reports whether one of the rule's limits is called name.
func (r *rule) named(name string) bool {
	return name != "" && slices.ContainsFunc(r.limits, func(l limit) bool { return l.name == name })
}

// limitNamed returns the rule's limit called name, or its first limit when
// none is (a single limit may be unnamed).
func (r *rule) limitNamed(name string) *limit {
	for i := range r.limits {
		if r.limits[i].name == name {
			return &r.limits[i]
		}
	}
	return &r.limits[0]
}

// unitSpec is a unit a rate_limit block may name.
type unitSpec struct {
	name string
	unit rlspb.RateLimitResponse_RateLimit_Unit
	len  time.Duration
}

// units are the units a rate_limit block may name, as envoyproxy/ratelimit
// accepts them (case does not matter), with their lengths: its month is 30
// days and its year 365.
var units = []unitSpec{
	{"second", rlspb.RateLimitResponse_RateLimit_SECOND, time.Second},
	{"minute", rlspb.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{"hour", rlspb.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{"day", rlspb.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{"week", rlspb.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	{"month", rlspb.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	{"year", rlspb.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// unitOf says how current_limit reports a window: the largest of day,
// hour, minute and second that divides it, times the number of them (3s is
// SECOND times 3). A window that is not a whole number of seconds has no
// unit the protocol can express: UNKNOWN, multiplier 1.
func unitOf(w time.Duration) (rlspb.RateLimitResponse_RateLimit_Unit, uint32) {
	for i := 3; i >= 0; i-- {
		u := units[i]
		if w%u.len == 0 && w/u.len <= math.MaxUint32 {
			return u.unit, uint32(w / u.len)
		}
	}
	return rlspb.RateLimitResponse_RateLimit_UNKNOWN, 1
}

// maxConfigErrors bounds the errors one load reports; past it, the rest of
// the file is not worth reading before those are fixed.
const maxConfigErrors = 20

// parseConfig reads a configuration file: one YAML document per domain
// (several documents may be separated by ---). An invalid file gives an
// error naming the file and line of each problem found, up to
// maxConfigErrors of them. Errors never quote a descriptor value: values
// may be credentials (an API key given its own limit).
func parseConfig(file string, data []byte) (*ruleSet, error) {
	return parseFiles([]configFile{{name: file, data: data}}, false)
}

// configFile is one file of a configuration: its name, as errors give it,
// and its content.
type configFile struct {
	name string
	data []byte
}

// parseFiles reads the files of a runtime directory into one rule set, as
// parseConfig reads one file: each file holds one domain or more, and a
// domain given in two files is an error, unless merge is set
// (MERGE_DOMAIN_CONFIG), which adds the second file's descriptors to the
// first's. A file with no domain is refused (most likely one caught half
// written); no file at all is an empty rule set, which decides nothing.
func parseFiles(files []configFile, merge bool) (*ruleSet, error) {
	p := &parser{rs: &ruleSet{domains: map[string]*node{}}, domainAt: map[string]string{}, merge: merge}
	for _, f := range files {
		p.file = f.name
		if !p.parseFile(f.data) {
			// Most likely a file caught half written: loading it would drop
			// every rule it holds.
			p.errs = append(p.errs, fmt.Errorf("%s: no domain: the file is empty", f.name))
		}
		if len(p.errs) >= maxConfigErrors {
			break
		}
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs[:min(len(p.errs), maxConfigErrors)]...)
	}
	return p.rs, nil
}

// parseFile reads the documents of one file and reports whether it held a
// domain (or an error).
func (p *parser) parseFile(data []byte) bool {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	found := false
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// yaml.v3's messages carry their line ("yaml: line 3: ...").
			p.errs = append(p.errs, fmt.Errorf("%s: %w", p.file, err))
			return true
		}
		if len(doc.Content) == 1 && doc.Content[0].Tag != "!!null" { // an empty document holds nothing
			found = true
			p.document(doc.Content[0])
		}
		if len(p.errs) >= maxConfigErrors {
			break
		}
	}
	return found
}

type parser struct {
	file     string // the file being read
	rs       *ruleSet
	domainAt map[string]string // where each domain was first given: "file:line"
	merge    bool
	errs     []error
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	if len(p.errs) < maxConfigErrors {
		p.errs = append(p.errs, fmt.Errorf("%s:%d: %s", p.file, n.Line, fmt.Sprintf(format, args...)))
	}
}

// resolve follows an alias (*name) to the node its anchor (&name) marks,
// so that a configuration may reuse a block.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// fields checks that n is a mapping of the allowed keys, each once, and
// returns its values by key, aliases resolved.
func (p *parser) fields(n *yaml.Node, what string, allowed ...string) (map[string]*yaml.Node, bool) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s: want a mapping, found %s", what, kindOf(n))
		return nil, false
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	ok := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case !slices.Contains(allowed, k.Value):
			p.errorf(k, "%s: unknown field %q, want one of %s", what, k.Value, strings.Join(allowed, ", "))
			ok = false
		case out[k.Value] != nil:
			p.errorf(k, "%s: field %s given twice", what, k.Value)
			ok = false
		default:
			out[k.Value] = resolve(v)
		}
	}
	return out, ok
}

func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	if n.Tag == "!!null" {
		return "nothing"
	}
	return "a scalar"
}

// text returns a scalar's text ("" for null): a key or value written as a
// number (value: 500) is its digits, as envoyproxy/ratelimit reads it.
func (p *parser) text(n *yaml.Node, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, "%s: want a string, found %s", field, kindOf(n))
		return "", false
	}
	if n.Tag == "!!null" {
		return "", true
	}
	return n.Value, true
}

func (p *parser) boolean(n *yaml.Node, field string) bool {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		p.errorf(n, "%s: want true or false", field)
		return false
	}
	return b
}

// document reads one domain.
func (p *parser) document(n *yaml.Node) {
	f, ok := p.fields(n, "top level", "domain", "descriptors")
	if !ok {
		return
	}
	dn := f["domain"]
	if dn == nil {
		p.errorf(n, "domain is missing")
		return
	}
	domain, ok := p.text(dn, "domain")
	switch {
	case !ok:
		return
	case domain == "":
		p.errorf(dn, "domain is empty")
		return
	case p.domainAt[domain] != "" && !p.merge:
		first := p.domainAt[domain]
		if f, line, _ := strings.Cut(first, ":"); f == p.file {
			first = "line " + line
		}
		p.errorf(dn, "domain %q is given twice (first at %s)", domain, first)
		return
	}
	root := p.rs.domains[domain]
	if root == nil {
		p.domainAt[domain] = fmt.Sprintf("%s:%d", p.file, dn.Line)
		root = &node{children: map[entry]*node{}}
		p.rs.domains[domain] = root
	}
	if ds := f["descriptors"]; ds != nil {
		p.descriptors(ds, root, domain, domain, "")
	}
}

// descriptors reads a list of descriptors into parent; path and stat are
// the parent's (see rule).
func (p *parser) descriptors(n *yaml.Node, parent *node, domain, path, stat string) {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		if n.Tag != "!!null" {
			p.errorf(n, "descriptors: want a list, found %s", kindOf(n))
		}
		return
	}
	for _, dn := range n.Content {
		p.descriptor(dn, parent, domain, path, stat)
	}
}

// descriptor reads one descriptor into parent, its rule and its own
// descriptors with it; path and stat are the parent's (see rule).
func (p *parser) descriptor(dn *yaml.Node, parent *node, domain, path, stat string) {
	f, ok := p.fields(dn, "descriptor", "key", "value", "rate_limit", "rate_limits", "descriptors",
		"shadow_mode", "detailed_metric", "value_to_metric", "share_threshold", "quota_mode", "metadata")
	if !ok {
		return
	}
	e, ok := p.entry(dn, f, parent)
	if !ok {
		return
	}
	child := &node{children: map[entry]*node{}, perValue: e.value == "", file: p.file, line: f["key"].Line}
	shared := false
	if sn := f["share_threshold"]; sn != nil && p.boolean(sn, "share_threshold") {
		if !strings.Contains(e.value, "*") {
			p.errorf(sn, "share_threshold: only a value with a wildcard (*) can share its threshold")
		}
		shared = true
	}
	r := &rule{domain: domain, file: p.file, line: f["key"].Line}
	if qn := f["quota_mode"]; qn != nil {
		r.quota = p.boolean(qn, "quota_mode")
	}
	if mn := f["metadata"]; mn != nil {
		r.metadata = p.metadata(mn)
	}
	for _, ignored := range []string{"detailed_metric", "value_to_metric"} {
		if vn := f[ignored]; vn != nil {
			p.boolean(vn, ignored) // checked, then ignored: metrics never hold a request's values
		}
	}
	if strings.Contains(e.value, "*") {
		child.perValue = !shared
		parent.wildcards = append(parent.wildcards, wildcard{key: e.key, parts: strings.Split(e.value, "*"), node: child})
	}
	parent.children[e] = child

	r.path = path + "\x00" + e.key + "\x00" + e.value
	r.stat = e.key
	if e.value != "" {
		r.stat += "_" + e.value
	}
	if stat != "" {
		r.stat = stat + "." + r.stat
	}
	if sn := f["shadow_mode"]; sn != nil {
		r.shadow = p.boolean(sn, "shadow_mode")
	}
	if p.limits(r, f) {
		child.rule = r
		p.rs.rules = append(p.rs.rules, r)
	}
	if ds := f["descriptors"]; ds != nil {
		p.descriptors(ds, child, domain, r.path, r.stat)
	}
}

// entry reads a descriptor's key and value, f its fields, and reports
// whether they make an entry that parent does not have yet.
func (p *parser) entry(dn *yaml.Node, f map[string]*yaml.Node, parent *node) (e entry, ok bool) {
	kn := f["key"]
	if kn == nil {
		p.errorf(dn, "descriptor: key is missing")
		return e, false
	}
	if e.key, ok = p.text(kn, "key"); !ok {
		return e, false
	}
	if e.key == "" {
		p.errorf(kn, "descriptor: key is empty")
		return e, false
	}
	if vn := f["value"]; vn != nil {
		if e.value, ok = p.text(vn, "value"); !ok {
			return e, false
		}
	}
	if first := parent.children[e]; first != nil {
		// The value stays out of the message: it may be a credential.
		at := fmt.Sprintf("line %d", first.line)
		if first.file != p.file {
			at = fmt.Sprintf("%s:%d", first.file, first.line)
		}
		p.errorf(kn, "descriptor: key %q with the same value is given twice at this level (first at %s)", e.key, at)
		return e, false
	}
	return e, true
}

// limits reads into r the rate_limit or rate_limits of a descriptor, f its
// fields, and reports whether it has either: whether r is a rule.
func (p *parser) limits(r *rule, f map[string]*yaml.Node) bool {
	rl, rls := f["rate_limit"], f["rate_limits"]
	switch {
	case rl != nil && rls != nil:
		p.errorf(rls, "descriptor: give rate_limit or rate_limits, not both")
		return false
	case rl != nil:
		r.line = rl.Line
		p.rateLimits(r, []*yaml.Node{rl}, "rate_limit")
	case rls == nil:
		return false
	case rls.Kind != yaml.SequenceNode || len(rls.Content) == 0:
		p.errorf(rls, "rate_limits: want a list of 1 to %d limits", backend.MaxPolicies)
	default:
		r.line = rls.Line
		p.rateLimits(r, rls.Content, "rate_limits")
	}
	return true
}

// metadata reads a descriptor's metadata: any mapping, returned to Envoy
// as it is written (see RESPONSE_DYNAMIC_METADATA).
func (p *parser) metadata(n *yaml.Node) *structpb.Struct {
	if n.Kind != yaml.MappingNode {
		if n.Tag != "!!null" {
			p.errorf(n, "metadata: want a mapping, found %s", kindOf(n))
		}
		return nil
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		p.errorf(n, "metadata: %v", err)
		return nil
	}
	st, err := structpb.NewStruct(m)
	if err != nil {
		// The message names the type at fault, never a value.
		p.errorf(n, "metadata: %v", err)
		return nil
	}
	return st
}

// rateLimits reads a rule's limits: a rate_limit block (one element) or
// the elements of a rate_limits list.
func (p *parser) rateLimits(r *rule, ns []*yaml.Node, field string) {
	if len(ns) > backend.MaxPolicies {
		p.errorf(ns[backend.MaxPolicies], "%s: %d limits, want at most %d", field, len(ns), backend.MaxPolicies)
		return
	}
	names := map[string]int{}
	for i, n := range ns {
		n = resolve(n)
		what := field
		if field == "rate_limits" {
			what = fmt.Sprintf("rate_limits[%d]", i)
		}
		f, ok := p.fields(n, what, "unit", "window", "requests_per_unit", "unlimited", "name", "replaces")
		if !ok {
			continue
		}
		p.rateLimit(r, n, f, what, len(ns), names)
	}
}

// rateLimit reads the limit n, f its fields, into r, one of the rule's of
// limits; names are the names of those read before it, at their lines.
func (p *parser) rateLimit(r *rule, n *yaml.Node, f map[string]*yaml.Node, what string, of int, names map[string]int) {
	var l limit
	if nn := f["name"]; nn != nil {
		var ok bool
		if l.name, ok = p.text(nn, what+".name"); !ok {
			return
		}
	}
	if rn := f["replaces"]; rn != nil {
		p.replaces(r, rn, what, l.name)
	}
	unlimited := false
	if un := f["unlimited"]; un != nil {
		unlimited = p.boolean(un, what+".unlimited")
	}
	if unlimited {
		switch {
		case of > 1:
			p.errorf(f["unlimited"], "%s: an unlimited limit must be the descriptor's only one", what)
		case f["unit"] != nil || f["window"] != nil:
			p.errorf(n, "%s: an unlimited limit takes no unit or window", what)
		}
		r.unlimited = true
		return
	}
	if !p.window(&l, n, f, what) {
		return
	}
	rpu := f["requests_per_unit"]
	if rpu == nil {
		p.errorf(n, "%s: requests_per_unit is missing (0 refuses every request; write it out to mean that)", what)
		return
	}
	v, err := strconv.ParseInt(rpu.Value, 10, 64)
	if rpu.Kind != yaml.ScalarNode || rpu.Tag != "!!int" || err != nil || v < 0 || v > math.MaxInt32 {
		p.errorf(rpu, "%s: requests_per_unit %q, want a whole number from 0 to %d", what, rpu.Value, math.MaxInt32)
		return
	}
	l.perUnit = int(v)
	if l.perUnit == 0 {
		r.blocked = true
	}
	if of > 1 {
		if l.name == "" {
			p.errorf(n, "%s: name is missing: each of several limits needs a name of its own", what)
			return
		}
		if first, dup := names[l.name]; dup {
			p.errorf(f["name"], "%s: name %q is already that of the limit at line %d", what, l.name, first)
			return
		}
		names[l.name] = f["name"].Line
	}
	r.limits = append(r.limits, l)
}

// window reads the unit or the window of the limit n, f its fields, into
// l, and reports whether it has one of them, valid.
func (p *parser) window(l *limit, n *yaml.Node, f map[string]*yaml.Node, what string) bool {
	unit, window := f["unit"], f["window"]
	switch {
	case unit != nil && window != nil:
		p.errorf(window, "%s: give unit or window, not both", what)
		return false
	case unit != nil:
		s, ok := p.text(unit, what+".unit")
		if !ok {
			return false
		}
		i := slices.IndexFunc(units, func(u unitSpec) bool { return strings.EqualFold(u.name, s) })
		if i < 0 {
			p.errorf(unit, "%s: unit %q, want second, minute, hour, day, week, month or year (or window: a duration)", what, s)
			return false
		}
		l.unit, l.window, l.multiplier = units[i].unit, units[i].len, 1
	case window != nil:
		s, ok := p.text(window, what+".window")
		if !ok {
			return false
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			p.errorf(window, "%s: window %q, want a positive duration such as 3s, 90s or 1h30m", what, s)
			return false
		}
		l.window = d
		l.unit, l.multiplier = unitOf(d)
	default:
		p.errorf(n, "%s: unit (or window) is missing", what)
		return false
	}
	return true
}

// replaces reads a limit's replaces list into r.
func (p *parser) replaces(r *rule, n *yaml.Node, what, own string) {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s.replaces: want a list of {name: ...}, found %s", what, kindOf(n))
		return
	}
	for _, e := range n.Content {
		f, ok := p.fields(e, what+".replaces", "name")
		if !ok {
			continue
		}
		nn := f["name"]
		if nn == nil {
			p.errorf(e, "%s.replaces: name is missing", what)
			continue
		}
		name, ok := p.text(nn, what+".replaces.name")
		switch {
		case !ok:
		case name == "":
			p.errorf(nn, "%s.replaces: name is empty", what)
		case name == own:
			p.errorf(nn, "%s.replaces: a limit cannot replace itself (%q)", what, name)
		default:
			r.replaces = append(r.replaces, name)
		}
	}
}

// dump writes the rules one a line, as envoyproxy/ratelimit's /rlconfig
// does: each rule's domain and path of keys, its limits, and its modes.
func (rs *ruleSet) dump() string {
	var b strings.Builder
	for _, r := range rs.rules {
		fmt.Fprintf(&b, "%s.%s:", r.domain, r.stat)
		switch {
		case r.unlimited:
			b.WriteString(" unlimited")
		default:
			for i, l := range r.limits {
				if i > 0 {
					b.WriteString(",")
				}
				if l.name != "" {
					fmt.Fprintf(&b, " %s", l.name)
				}
				fmt.Fprintf(&b, " requests_per_unit=%d window=%v", l.perUnit, l.window)
			}
		}
		fmt.Fprintf(&b, ", shadow_mode: %t, quota_mode: %t\n", r.shadow, r.quota)
	}
	return b.String()
}
