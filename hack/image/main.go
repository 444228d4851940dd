// Command image writes a container image without a registry or a Docker daemon: one layer holding
// the given files plus what distroless/static provides to a static Go binary (/etc/passwd and
// /etc/group with the nonroot and nobody users, /tmp, the host's CA bundle), and a config with the
// entrypoint and user. hack/cluster.sh builds the images of hack/images.txt and the Pod sandbox's
// with it, for the host's architecture, as docker-archive tarballs for `ctr images import` (--out);
// hack/image-index.sh builds them for linux/amd64 and linux/arm64 as one OCI image index each, in an
// OCI image layout to push to a registry (--layout).
//
//	image --tag localhost/toolgate/toolgate:dev --out bin/images/toolgate.tar \
//	  --entrypoint /manager --user 65532:65532 \
//	  --file /manager=bin/linux/manager
//
//	image --tag toolgate:0.1.0 --layout bin/oci/toolgate --platform linux/amd64 --platform linux/arm64 \
//	  --entrypoint /manager --file '/manager=bin/linux_{arch}/manager'
//
// With several platforms, {arch} in a --file's host path is each platform's architecture.
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
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type listFlags []string

func (f *listFlags) String() string     { return strings.Join(*f, ",") }
func (f *listFlags) Set(v string) error { *f = append(*f, v); return nil }

// spec is what every platform's image of one build shares.
type spec struct {
	entrypoint, user, caBundle string
	files                      []string          // IMAGE_PATH=HOST_PATH, {arch} replaced per platform
	labels                     map[string]string // the config's labels
}

func main() {
	var files, platforms listFlags
	tag := flag.String("tag", "", "image reference, e.g. localhost/toolgate/toolgate:dev (required)")
	out := flag.String("out", "", "docker-archive tarball to write, of one platform")
	dir := flag.String("layout", "", "OCI image layout directory to write the image index into, created or replaced")
	entrypoint := flag.String("entrypoint", "", "entrypoint: the path of an executable in the image (required)")
	user := flag.String("user", "65532:65532", "uid:gid the entrypoint runs as")
	caBundle := flag.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to install as /etc/ssl/certs/ca-certificates.crt (empty: none)")
	flag.Var(&files, "file", "IMAGE_PATH=HOST_PATH: an executable to add (repeatable); {arch} in HOST_PATH is the platform's architecture")
	flag.Var(&platforms, "platform", "OS/ARCH of an image to build, e.g. linux/arm64 (repeatable; default: linux and the host's architecture)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("image: ")
	if *tag == "" || *entrypoint == "" || (*out == "") == (*dir == "") {
		log.Fatal("--tag, --entrypoint and one of --out (a tarball) or --layout (an OCI image layout) are required")
	}
	if len(platforms) == 0 {
		platforms = listFlags{"linux/" + runtime.GOARCH}
	}
	s := spec{entrypoint: *entrypoint, user: *user, caBundle: *caBundle, files: files}
	var err error
	if *out != "" {
		err = writeTarball(*tag, *out, platforms, s)
	} else {
		err = writeLayout(*tag, *dir, platforms, s)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// writeTarball writes the image of the only platform as a docker-archive tarball.
func writeTarball(tag, out string, platforms []string, s spec) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("--tag %q: %w", tag, err)
	}
	if len(platforms) != 1 {
		return fmt.Errorf("--out writes one platform's image, not %d (%s): use --layout for an image index", len(platforms), strings.Join(platforms, ","))
	}
	p, err := v1.ParsePlatform(platforms[0])
	if err != nil {
		return fmt.Errorf("--platform %q: %w", platforms[0], err)
	}
	img, err := build(*p, s)
	if err != nil {
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

// writeLayout writes one image per platform, as one OCI image index, into an OCI image layout whose
// index.json names it tag (annotation org.opencontainers.image.ref.name).
func writeLayout(tag, dir string, platforms []string, s spec) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("--tag %q: %w", tag, err)
	}
	// The version in the config makes a released image another image than the local cluster's :dev
	// one built from the same binaries (another config digest, so another image ID in containerd).
	s.labels = map[string]string{"org.opencontainers.image.version": ref.TagStr()}
	idx, err := index(platforms, s)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return fmt.Errorf("writing %s: %w", dir, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", tag, d, dir)
	return nil
}

// index builds the image of each platform and lists them in one OCI image index.
func index(platforms []string, s spec) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, pf := range platforms {
		p, err := v1.ParsePlatform(pf)
		if err != nil {
			return nil, fmt.Errorf("--platform %q: %w", pf, err)
		}
		img, err := build(*p, s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pf, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	return idx, nil
}

// build returns the image of one platform, in OCI media types.
func build(p v1.Platform, s spec) (v1.Image, error) {
	if p.OS != "linux" || p.Architecture == "" {
		return nil, fmt.Errorf("--platform %q: want linux/ARCH, e.g. linux/arm64", p.String())
	}
	files := make([]string, len(s.files))
	for i, f := range s.files {
		files[i] = strings.ReplaceAll(f, "{arch}", p.Architecture)
	}
	layer, err := rootLayer(files, s.caBundle)
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer, History: v1.History{CreatedBy: "hack/image", Created: v1.Time{Time: time.Unix(0, 0)}}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = p.OS
	cf.Architecture = p.Architecture
	cf.Variant = p.Variant
	cf.Created = v1.Time{Time: time.Unix(0, 0)}
	cf.Config.Entrypoint = []string{s.entrypoint}
	cf.Config.User = s.user
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = s.labels
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	return mutate.ConfigFile(img, cf)
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
