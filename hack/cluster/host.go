package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// forwardGuard keeps Pod traffic on this machine: Pods reach each other, Services and this machine's
// own addresses, and nothing beyond it.
var forwardGuard = []string{"FORWARD", "-i", bridgeName, "!", "-o", bridgeName,
	"-m", "comment", "--comment", "toolgate cluster: Pod traffic stays on this machine", "-j", "DROP"}

// sysctls the node needs; their previous values are saved under sysctl/ and restored on stop.
var sysctls = map[string]string{
	"net/ipv4/ip_forward":                "1", // Services whose endpoints are Pods on the bridge
	"net/bridge/bridge-nf-call-iptables": "1", // kube-proxy's DNAT seen by bridged replies
}

func (c *cluster) setupNetwork() error {
	if err := os.MkdirAll(c.path("sysctl"), 0o700); err != nil {
		return err
	}
	for key, want := range sysctls {
		path := "/proc/sys/" + key
		old, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("sysctl %s: %w", key, err)
		}
		saved := c.path("sysctl", strings.ReplaceAll(key, "/", "."))
		if _, err := os.Stat(saved); errors.Is(err, os.ErrNotExist) { // keep the value from before a failed run
			if err := os.WriteFile(saved, old, 0o600); err != nil {
				return err
			}
		}
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", key, want, err)
		}
	}
	if err := exec.Command("ip", "link", "show", bridgeName).Run(); err != nil {
		if err := run("ip", "link", "add", bridgeName, "type", "bridge"); err != nil {
			return err
		}
	}
	if out, _ := exec.Command("ip", "-4", "addr", "show", "dev", bridgeName).Output(); !strings.Contains(string(out), bridgeIP+"/") {
		if err := run("ip", "addr", "add", bridgeIP+"/24", "dev", bridgeName); err != nil {
			return err
		}
	}
	if err := run("ip", "link", "set", bridgeName, "up"); err != nil {
		return err
	}
	if exec.Command("iptables", append([]string{"-C"}, forwardGuard...)...).Run() != nil {
		return run("iptables", append([]string{"-I", forwardGuard[0], "1"}, forwardGuard[1:]...)...)
	}
	return nil
}

// stopAll stops the components in reverse order, removing every Pod sandbox through containerd (its
// containers, network namespace and CNI address) before containerd stops, then cleans up the host.
func (c *cluster) stopAll() error {
	byName := map[string]*proc{}
	for _, p := range c.procs {
		byName[p.name] = p
	}
	for _, name := range []string{"kube-proxy", "kubelet"} {
		if p := byName[name]; p != nil {
			p.stop(15 * time.Second)
		}
	}
	var errs []error
	if p := byName["containerd"]; p != nil {
		if !p.exited() {
			errs = append(errs, c.removeSandboxes())
		}
		p.stop(30 * time.Second)
	}
	for _, name := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		if p := byName[name]; p != nil {
			p.stop(30 * time.Second)
		}
	}
	errs = append(errs, c.cleanupHost())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.RemoveAll(c.path("pids"))
}

// cleanup undoes what an `up` that died left: its processes, Pod sandboxes (through a containerd
// started again on the same state), mounts, iptables rules, the bridge and sysctls.
func (c *cluster) cleanup() error {
	if _, err := os.Stat(c.dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	c.killRecorded()
	var errs []error
	// After a clean stop (pids/ removed) no sandbox is left; after a crash, containerd removes them.
	_, crashed := os.Stat(c.path("pids"))
	if _, err := os.Stat(c.path("containerd", "config.toml")); err == nil && crashed == nil {
		exited := make(chan *proc, 1)
		p, err := c.start("containerd", exited, "/usr/bin/containerd", "--config", c.path("containerd", "config.toml"))
		if err == nil {
			if err = c.waitFor(context.Background(), p, "containerd", c.criReady); err == nil {
				err = c.removeSandboxes()
			}
			p.stop(30 * time.Second)
		}
		errs = append(errs, err)
	}
	errs = append(errs, c.cleanupHost())
	return errors.Join(errs...)
}

func (c *cluster) removeSandboxes() error {
	rt, closeConn, err := c.cri()
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("listing Pod sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range resp.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stopping sandbox of Pod %s/%s: %w", sb.Metadata.Namespace, sb.Metadata.Name, err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox of Pod %s/%s: %w", sb.Metadata.Namespace, sb.Metadata.Name, err))
		}
	}
	if len(resp.Items) > 0 {
		log.Printf("removed %d Pod sandboxes", len(resp.Items))
	}
	return errors.Join(errs...)
}

// cleanupHost undoes the node's changes outside the state directory and unmounts what is mounted in it.
func (c *cluster) cleanupHost() error {
	var errs []error
	c.killShims()
	if _, err := os.Stat(c.bin("kube-proxy")); c.assets != "" && err == nil {
		if err := run(c.bin("kube-proxy"), "--cleanup"); err != nil {
			errs = append(errs, err)
		}
	}
	for exec.Command("iptables", append([]string{"-C"}, forwardGuard...)...).Run() == nil {
		if err := run("iptables", append([]string{"-D"}, forwardGuard...)...); err != nil {
			errs = append(errs, err)
			break
		}
	}
	errs = append(errs, removeKubeChains())
	if exec.Command("ip", "link", "show", bridgeName).Run() == nil {
		errs = append(errs, run("ip", "link", "delete", bridgeName))
	}
	for key := range sysctls {
		saved := c.path("sysctl", strings.ReplaceAll(key, "/", "."))
		if old, err := os.ReadFile(saved); err == nil {
			if err := os.WriteFile("/proc/sys/"+key, old, 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restoring sysctl %s: %w", key, err))
			} else {
				_ = os.Remove(saved)
			}
		}
	}
	errs = append(errs, c.unmountAll())
	c.removeContainerLogLinks()
	removeCgroups()
	return errors.Join(errs...)
}

// removeKubeChains removes the KUBE-* chains and the jumps to them that kubelet and kube-proxy left in
// iptables and ip6tables (kube-proxy --cleanup removes only kube-proxy's own).
func removeKubeChains() error {
	var errs []error
	for _, ipt := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(ipt); err != nil {
			continue
		}
		for _, table := range []string{"filter", "nat", "mangle"} {
			out, err := exec.Command(ipt, "-t", table, "-S").Output()
			if err != nil {
				continue
			}
			var chains []string
			for _, line := range strings.Split(string(out), "\n") {
				f := splitRule(line)
				switch {
				case len(f) == 2 && f[0] == "-N" && strings.HasPrefix(f[1], "KUBE-"):
					chains = append(chains, f[1])
				case len(f) > 2 && f[0] == "-A" && !strings.HasPrefix(f[1], "KUBE-") && strings.Contains(line, "-j KUBE-"):
					// a jump from a built-in chain: delete that rule by its spec (the rest of the line)
					if err := run(ipt, append([]string{"-t", table, "-D"}, f[1:]...)...); err != nil {
						errs = append(errs, err)
					}
				}
			}
			for _, ch := range chains {
				_ = exec.Command(ipt, "-t", table, "-F", ch).Run()
			}
			for _, ch := range chains {
				if err := run(ipt, "-t", table, "-X", ch); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// splitRule splits a line of `iptables -S` into arguments; double quotes group words (comments).
func splitRule(line string) []string {
	var args []string
	var cur strings.Builder
	inQuote, inArg := false, false
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\\' && inQuote && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case ch == '"':
			inQuote, inArg = !inQuote, true
		case ch == ' ' && !inQuote:
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(ch)
			inArg = true
		}
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args
}

// killShims kills containerd-shim processes serving this cluster's containerd (left when containerd
// was killed) together with their containers.
func (c *cluster) killShims() {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		data, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(data), "containerd-shim") || !strings.Contains(string(data), c.containerdSocket()) {
			continue
		}
		pid, err := strconv.Atoi(strings.Split(f, "/")[2])
		if err != nil {
			continue
		}
		log.Printf("killing leftover containerd shim %d", pid)
		_ = syscall.Kill(-pid, syscall.SIGKILL) // shims lead their own process group
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// unmountAll unmounts everything mounted under the state directory (kubelet's volumes, containerd's
// root filesystems and shm), deepest first.
func (c *cluster) unmountAll() error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(unescapeMount(fields[4]), c.dir+"/") {
			mounts = append(mounts, unescapeMount(fields[4]))
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// removeContainerLogLinks removes kubelet's links in /var/log/containers into this cluster's logs.
func (c *cluster) removeContainerLogLinks() {
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, c.dir+"/") {
			_ = os.Remove(l)
		}
	}
}

// removeCgroups removes the kubelet's (now empty) kubepods cgroups in every hierarchy.
func removeCgroups() {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if _, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil {
		roots = append(roots, "/sys/fs/cgroup/kubepods")
	}
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = syscall.Rmdir(dirs[i])
		}
	}
}
