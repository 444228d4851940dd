package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image index hack/image-index.sh pushes: one OCI image index listing linux/amd64 and
// linux/arm64, each manifest's config naming its own architecture, and the binary inside each an
// ELF executable for that machine (cross-compiled with GOARCH, CGO_ENABLED=0).
func TestIndexHoldsEachPlatformsOwnBinary(t *testing.T) {
	dir := t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, "linux_"+arch, "pause"), "../pause")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build for %s: %v\n%s", arch, err, out)
		}
	}
	out := filepath.Join(dir, "oci")
	s := spec{entrypoint: "/pause", user: "65535:65535", files: []string{"/pause=" + filepath.Join(dir, "linux_{arch}", "pause")}}
	if err := writeLayout("localhost/toolgate/pause:3.10", out, []string{"linux/amd64", "linux/arm64"}, s); err != nil {
		t.Fatal(err)
	}

	root, err := layout.ImageIndexFromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 || rm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "localhost/toolgate/pause:3.10" {
		t.Fatalf("the layout's index.json lists %+v, want the one image index named by its tag", rm.Manifests)
	}
	idx, err := root.ImageIndex(rm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", im.MediaType, types.OCIImageIndex)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	if len(im.Manifests) != len(want) {
		t.Fatalf("the index lists %d manifests, want %d", len(im.Manifests), len(want))
	}
	for _, m := range im.Manifests {
		if m.Platform == nil || m.Platform.OS != "linux" {
			t.Fatalf("manifest %s: platform %v, want linux/<arch>", m.Digest, m.Platform)
		}
		arch := m.Platform.Architecture
		machine, ok := want[arch]
		if !ok {
			t.Fatalf("the index lists %s, want only linux/amd64 and linux/arm64", m.Platform)
		}
		delete(want, arch)
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != arch {
			t.Errorf("%s: config says %s/%s", arch, cf.OS, cf.Architecture)
		}
		if cf.Config.Labels["org.opencontainers.image.version"] != "3.10" {
			t.Errorf("%s: labels %v, want org.opencontainers.image.version 3.10", arch, cf.Config.Labels)
		}
		if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/pause" || cf.Config.User != "65535:65535" {
			t.Errorf("%s: entrypoint %v, user %q", arch, cf.Config.Entrypoint, cf.Config.User)
		}
		bin := fileInImage(t, img, "pause")
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: /pause is not ELF: %v", arch, err)
		}
		if f.Machine != machine {
			t.Errorf("%s: /pause is ELF for %s, want %s", arch, f.Machine, machine)
		}
	}
	if len(want) != 0 {
		t.Errorf("the index lacks %v", want)
	}
}

// A tarball for `ctr images import` holds one platform's image: two are refused with the way out.
func TestTarballRefusesSeveralPlatforms(t *testing.T) {
	err := writeTarball("localhost/toolgate/pause:3.10", filepath.Join(t.TempDir(), "pause.tar"), []string{"linux/amd64", "linux/arm64"}, spec{entrypoint: "/pause"})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("use --layout")) {
		t.Fatalf("got %v, want an error that says to use --layout", err)
	}
}

// fileInImage returns the file at path (relative to /) from the image's layers.
func fileInImage(t *testing.T, img v1.Image, path string) []byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Name == path {
				data, err := io.ReadAll(tr)
				_ = rc.Close()
				if err != nil {
					t.Fatal(err)
				}
				return data
			}
		}
		_ = rc.Close()
	}
	t.Fatalf("/%s is not in the image", path)
	return nil
}
