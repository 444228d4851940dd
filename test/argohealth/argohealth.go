// Package argohealth runs Toolgate's Argo CD health checks (config/argocd/resource_customizations,
// laid out as Argo CD's own resource_customizations) the way Argo CD runs them: gopher-lua, the
// libraries Argo CD opens for a health check (package, base and table; no string, no os), the
// object as the global obj, and a table with status and message as the result.
package argohealth

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	lua "github.com/yuin/gopher-lua"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/test/testenv"
)

// Kinds are the kinds Toolgate serves a health check for.
var Kinds = []string{"ToolCall", "Tool", tg.KindApprovalProvider, tg.KindClusterApprovalProvider, tg.KindMCPServer}

// Dir is where the health checks of kind are, from the repository root: health.lua, health_test.yaml
// and testdata, as in Argo CD's resource_customizations/<group>/<kind>.
func Dir(kind string) string {
	return filepath.Join("config", "argocd", "resource_customizations", tg.GroupVersion.Group, kind)
}

// Script reads the health check of kind.
func Script(kind string) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, Dir(kind), "health.lua"))
	return string(b), err
}

// Status is a health check's result, as Argo CD's health.HealthStatus.
type Status struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// validStatuses are the health statuses Argo CD accepts from a script; any other is Unknown.
var validStatuses = map[string]bool{"Unknown": true, "Progressing": true, "Suspended": true, "Healthy": true, "Degraded": true, "Missing": true}

// Run runs script over obj (decoded JSON, as unstructured holds it).
func Run(script string, obj map[string]any) (Status, error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		if err := L.CallByParam(lua.P{Fn: L.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return Status{}, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // Argo CD's limit
	defer cancel()
	L.SetContext(ctx)
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		return Status{}, err
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return Status{}, fmt.Errorf("expect table output from Lua script, not %s", L.Get(-1).Type())
	}
	var st Status
	for _, f := range []struct {
		key string
		to  *string
	}{{"status", &st.Status}, {"message", &st.Message}} {
		switch v := ret.RawGetString(f.key).(type) {
		case lua.LString:
			*f.to = string(v)
		case *lua.LNilType:
		default:
			return Status{}, fmt.Errorf("%s is a %s, not a string", f.key, v.Type())
		}
	}
	if !validStatuses[st.Status] {
		return Status{Status: "Unknown", Message: "Lua returned an invalid health status"}, nil
	}
	return st, nil
}

// toLua converts decoded JSON into Lua values, as Argo CD hands an object to a health check.
func toLua(L *lua.LState, v any) lua.LValue {
	switch x := v.(type) {
	case map[string]any:
		t := L.CreateTable(0, len(x))
		for k, e := range x {
			t.RawSetH(lua.LString(k), toLua(L, e))
		}
		return t
	case []any:
		t := L.CreateTable(len(x), 0)
		for _, e := range x {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(x)
	case json.Number:
		return lua.LString(x)
	case bool:
		return lua.LBool(x)
	case int64:
		return lua.LNumber(x)
	case int32:
		return lua.LNumber(x)
	case int:
		return lua.LNumber(x)
	case float64:
		return lua.LNumber(x)
	}
	return lua.LNil
}
