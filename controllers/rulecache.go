package controllers

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/policy"
)

// ruleCache holds each Tool's compiled approval rules for one generation of it: rules are compiled
// once per generation, by whichever controller needs them first.
type ruleCache struct {
	compiler *policy.Compiler
	mu       sync.Mutex
	tools    map[types.UID]*compiledRules
}

type compiledRules struct {
	generation int64
	rules      *policy.Rules
	err        error
}

func newRuleCache(limits policy.Limits) (*ruleCache, error) {
	c, err := policy.NewCompiler(limits)
	if err != nil {
		return nil, fmt.Errorf("building the approval rules' CEL environment: %w", err)
	}
	return &ruleCache{compiler: c, tools: map[types.UID]*compiledRules{}}, nil
}

// rules returns the Tool's compiled rules, or the compiler's message for every rule that does not
// compile.
func (c *ruleCache) rules(tool *tg.Tool) (*policy.Rules, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.tools[tool.UID]; ok && e.generation == tool.Generation {
		return e.rules, e.err
	}
	rs, err := c.compiler.Compile(tool.Spec.Approval)
	c.tools[tool.UID] = &compiledRules{generation: tool.Generation, rules: rs, err: err}
	return rs, err
}

// forget drops a deleted Tool's rules.
func (c *ruleCache) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.tools, uid)
}
