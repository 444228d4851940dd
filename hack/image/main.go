// Command image writes a container image as a docker-archive tarball, without a registry or a Docker
// daemon, for `ctr images import`: one layer holding the given files plus what distroless/static
// provides to a static Go binary (/etc/passwd and /etc/group with the nonroot and nobody users,
// /tmp, the host's CA bundle), and a config with the entrypoint and user. hack/cluster.sh builds the
// images of hack/images.txt and the Pod sandbox's with it.
//
//	image --tag localhost/toolgate/toolgate:dev --out bin/images/toolgate.tar \
//	  --entrypoint /manager --user 65532:65532 \
//	  --file /manager=bin/linux/manager
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type fileFlags []string

func (f *fileFlags) String() string     { return strings.Join(*f, ",") }
func (f *fileFlags) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	var files fileFlags
	tag := flag.String("tag", "", "image reference, e.g. localhost/toolgate/toolgate:dev (required)")
	out := flag.String("out", "", "docker-archive tarball to write (required)")
	entrypoint := flag.String("entrypoint", "", "entrypoint: the path of an executable in the image (required)")
	user := flag.String("user", "65532:65532", "uid:gid the entrypoint runs as")
	caBundle := flag.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to install as /etc/ssl/certs/ca-certificates.crt (empty: none)")
	flag.Var(&files, "file", "IMAGE_PATH=HOST_PATH: an executable to add (repeatable)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("image: ")
	if *tag == "" || *out == "" || *entrypoint == "" {
		log.Fatal("--tag, --out and --entrypoint are required")
	}
	if err := build(*tag, *out, *entrypoint, *user, *caBundle, files); err != nil {
		log.Fatal(err)
	}
}

func build(tag, out, entrypoint, user, caBundle string, files []string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("--tag %q: %w", tag, err)
	}
	layer, err := rootLayer(files, caBundle)
	if err != nil {
		return err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: layer, History: v1.History{CreatedBy: "hack/image", Created: v1.Time{Time: time.Unix(0, 0)}}})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Created = v1.Time{Time: time.Unix(0, 0)}
	cf.Config.Entrypoint = []string{entrypoint}
	cf.Config.User = user
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", tag, d, out)
	return nil
}

// rootLayer returns the image's only layer: the files, the users and groups, /tmp and the CA bundle.
func rootLayer(files []string, caBundle string) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dir := func(path string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: path + "/", Mode: mode, ModTime: epoch})
	}
	file := func(path string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"etc", "etc/ssl", "etc/ssl/certs", "home", "home/nonroot", "dev", "proc", "sys", "var", "var/run"} {
		if err := dir(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := dir("tmp", 0o1777); err != nil {
		return nil, err
	}
	// The users of distroless/static: root, nobody (65534) and nonroot (65532).
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group := "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"
	if err := file("etc/passwd", 0o644, []byte(passwd)); err != nil {
		return nil, err
	}
	if err := file("etc/group", 0o644, []byte(group)); err != nil {
		return nil, err
	}
	if caBundle != "" {
		data, err := os.ReadFile(caBundle)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if err == nil {
			if err := file("etc/ssl/certs/ca-certificates.crt", 0o644, data); err != nil {
				return nil, err
			}
		}
	}
	for _, f := range files {
		dst, src, ok := strings.Cut(f, "=")
		if !ok || !strings.HasPrefix(dst, "/") || strings.Count(dst, "/") != 1 || src == "" {
			return nil, fmt.Errorf("--file %q: want /NAME=HOST_PATH (a file in the image's root directory)", f)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("--file %q: %w", f, err)
		}
		if err := file(strings.TrimPrefix(dst, "/"), 0o755, data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}
