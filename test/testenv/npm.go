package testenv

import (
	"fmt"
	"os"
	"path/filepath"
)

// NPMPackageDir is where hack/install-test-deps.sh installs the npm packages of name (the directory
// ${TOOLGATE_NPM_DIR:-~/.cache/toolgate/npm}/name), checked by the file marker below it, e.g.
// node_modules/@modelcontextprotocol/sdk/package.json. The error, when it is not installed, says
// how to install it; the caller decides whether that fails or skips its test.
func NPMPackageDir(name, marker string) (string, error) {
	base := os.Getenv("TOOLGATE_NPM_DIR")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		base = filepath.Join(home, ".cache", "toolgate", "npm")
	}
	dir := filepath.Join(base, name)
	if _, err := os.Stat(filepath.Join(dir, marker)); err != nil {
		return "", fmt.Errorf("%s is not installed in %s (%v): run hack/install-test-deps.sh (needs Node 20 and npm)", name, dir, err)
	}
	return dir, nil
}
