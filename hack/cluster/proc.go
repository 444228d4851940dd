package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one component's process: its output goes to logs/<name>.log and its pid to pids/<name>.
type proc struct {
	name, logPath string
	cmd           *exec.Cmd
	done          chan struct{}
	err           error
}

// start runs a component; exited receives it should it exit before stopAll stops it.
func (c *cluster) start(name string, exited chan<- *proc, bin string, args ...string) (*proc, error) {
	logPath := c.path("logs", name+".log")
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so a Ctrl-C reaches only this program, which stops the components in
	// order; and killed should this program die without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	c.procs = append(c.procs, p)
	if err := os.MkdirAll(c.path("pids"), 0o700); err == nil {
		_ = os.WriteFile(c.path("pids", name), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
	}
	go func() {
		p.err = cmd.Wait()
		_ = out.Close()
		close(p.done)
		select {
		case exited <- p:
		default:
		}
	}()
	log.Printf("%s started (pid %d, log %s)", name, cmd.Process.Pid, logPath)
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError says that the component exited, with the last lines of its log.
func (p *proc) exitError() error {
	return fmt.Errorf("%s exited (%v); see %s:\n%s", p.name, p.err, p.logPath, tail(p.logPath, 15))
}

// stop sends SIGTERM and, after grace, SIGKILL.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		log.Printf("%s did not stop in %s; killing it", p.name, grace)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitFor polls check every 250ms until it returns nil, the component exits, or timeout passes.
func (c *cluster) waitFor(ctx context.Context, p *proc, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		if p != nil && p.exited() {
			return p.exitError()
		}
		select {
		case <-ctx.Done():
			where := ""
			if p != nil {
				where = fmt.Sprintf("; see %s:\n%s", p.logPath, tail(p.logPath, 15))
			}
			return fmt.Errorf("%s not ready after %s: %v%s", what, c.timeout, last, where)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// run runs a short command and returns its error with its output.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// killRecorded kills the processes recorded in pids/ by an `up` that died, if they still run the
// binary they ran then.
func (c *cluster) killRecorded() {
	entries, err := os.ReadDir(c.path("pids"))
	if err != nil {
		return
	}
	for _, e := range entries {
		data, err := os.ReadFile(c.path("pids", e.Name()))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 1 {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmdline), c.dir) {
			continue // gone, or another process now has the pid
		}
		log.Printf("killing leftover %s (pid %d)", e.Name(), pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; i < 50; i++ {
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
