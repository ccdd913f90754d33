// Command imagebuild builds kaas' OCI images without a base image or a container engine
// (package kaas/e2e/imagebuild), checks them against the Dockerfiles, pushes them, and serves a
// registry (go-containerregistry's pkg/registry) for the e2e harness.
//
//	imagebuild build  -dockerfile operator/broker.Dockerfile -binary target/release/kaas \
//	                  -repo ghcr.io/kaas/kaas -version 0.1.0 -revision $(git rev-parse HEAD) -out build/images/kaas
//	imagebuild bundle -dir bundle -repo ghcr.io/kaas/kaas-operator-bundle -version 0.1.0 -out build/images/kaas-operator-bundle
//	imagebuild catalog -bundle-dir bundle -bundle-image ghcr.io/kaas/kaas-operator-bundle:0.1.0 \
//	                  -repo ghcr.io/kaas/kaas-operator-catalog -version 0.1.0 -render build/catalog -out build/images/kaas-operator-catalog
//	imagebuild verify -dockerfile operator/broker.Dockerfile -layout build/images/kaas
//	imagebuild push   -layout build/images/kaas -to registry.example:5000/kaas/kaas
//	imagebuild serve  -listen 127.0.0.1:5000 -dir /tmp/registry
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"kaas/e2e/imagebuild"
)

func main() {
	log.SetFlags(0)
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "bundle":
		err = bundle(os.Args[2:])
	case "catalog":
		err = catalog(os.Args[2:])
	case "verify":
		err = verify(os.Args[2:])
	case "push":
		err = push(os.Args[2:])
	case "serve":
		err = serve(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		log.Fatalf("imagebuild %s: %v", os.Args[1], err)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: imagebuild build|bundle|catalog|verify|push|serve [flags] (imagebuild <cmd> -h)")
	os.Exit(2)
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	dockerfile := fs.String("dockerfile", "", "the Dockerfile whose runtime stage the image reproduces (entrypoint, cmd, binary path)")
	binary := fs.String("binary", "", "the binary to ship")
	repo := fs.String("repo", "", "image repository, e.g. ghcr.io/kaas/kaas")
	version := fs.String("version", "", "the crate version (first tag, org.opencontainers.image.version)")
	revision := fs.String("revision", "", "the git revision (second tag, org.opencontainers.image.revision)")
	source := fs.String("source", "", "org.opencontainers.image.source")
	created := fs.Int64("created", 0, "creation time, Unix seconds (the commit time keeps builds reproducible)")
	strip := fs.Bool("strip-debug", true, "ship the binary through objcopy --strip-debug")
	out := fs.String("out", "", "OCI layout directory to (re)write")
	pushTo := fs.String("push", "", "also push every tag to this repository (host[:port]/path)")
	_ = fs.Parse(args)
	if *dockerfile == "" || *binary == "" || *repo == "" || *version == "" || *out == "" {
		return fmt.Errorf("-dockerfile, -binary, -repo, -version and -out are required")
	}
	df, err := imagebuild.ParseDockerfile(*dockerfile)
	if err != nil {
		return err
	}
	if len(df.Copies) == 0 {
		return fmt.Errorf("%s copies nothing into its runtime stage", *dockerfile)
	}
	start := time.Now()
	img, err := imagebuild.Build(imagebuild.Spec{
		Binary: *binary, Path: df.Copies[len(df.Copies)-1], Entrypoint: df.Entrypoint, Cmd: df.Cmd,
		Title: path.Base(*repo), Version: *version, Revision: *revision, Source: *source,
		Created: time.Unix(*created, 0).UTC(), StripDebug: *strip,
	})
	if err != nil {
		return err
	}
	if bad, err := imagebuild.Verify(img, df); err != nil {
		return err
	} else if len(bad) > 0 {
		return fmt.Errorf("the image does not match %s:\n  %s", *dockerfile, joinLines(bad))
	}
	tags := imagebuild.Tags(*version, *revision)
	if err := imagebuild.WriteLayout(*out, img, *repo, tags); err != nil {
		return err
	}
	digest, _ := img.Digest()
	size := int64(0)
	layers, _ := img.Layers()
	for _, l := range layers {
		s, _ := l.Size()
		size += s
	}
	for _, t := range tags {
		fmt.Printf("%s:%s %s (%.1f MB compressed) → %s [%.1fs]\n", *repo, t, digest, float64(size)/1e6, *out, time.Since(start).Seconds())
	}
	if *pushTo != "" {
		return pushLayout(*out, *pushTo)
	}
	return nil
}

// bundle builds the OLM bundle image of a directory `make bundle` wrote (its bundle.Dockerfile).
func bundle(args []string) error {
	fs := flag.NewFlagSet("bundle", flag.ExitOnError)
	dir := fs.String("dir", "bundle", "the bundle directory (bundle.Dockerfile, manifests/, metadata/)")
	o := outputFlags(fs, "ghcr.io/kaas/kaas-operator-bundle")
	_ = fs.Parse(args)
	if err := o.check(); err != nil {
		return err
	}
	img, err := imagebuild.BuildBundle(*dir, o.spec())
	if err != nil {
		return err
	}
	if bad, err := imagebuild.VerifyBundle(img); err != nil {
		return err
	} else if len(bad) > 0 {
		return fmt.Errorf("the bundle image is not what OLM reads:\n  %s", joinLines(bad))
	}
	return o.write(img)
}

// output is where and as what a scratch image (bundle, catalog) goes: its repository, version
// and labels, the layout written, and where it is pushed.
type output struct {
	repo, version, revision, source, out, pushTo *string
	created                                      *int64
}

func outputFlags(fs *flag.FlagSet, example string) output {
	return output{
		repo:     fs.String("repo", "", "image repository, e.g. "+example),
		version:  fs.String("version", "", "the operator's version"),
		revision: fs.String("revision", "", "the git revision"),
		source:   fs.String("source", "", "org.opencontainers.image.source"),
		created:  fs.Int64("created", 0, "creation time, Unix seconds"),
		out:      fs.String("out", "", "OCI layout directory to (re)write"),
		pushTo:   fs.String("push", "", "also push every tag to this repository"),
	}
}

func (o output) check() error {
	if *o.repo == "" || *o.version == "" || *o.out == "" {
		return fmt.Errorf("-repo, -version and -out are required")
	}
	return nil
}

func (o output) spec() imagebuild.Spec {
	return imagebuild.Spec{Title: path.Base(*o.repo), Version: *o.version, Revision: *o.revision,
		Source: *o.source, Created: time.Unix(*o.created, 0).UTC()}
}

// write writes img as the layout out, tagged with the version and the version-revision, and
// pushes every tag when asked.
func (o output) write(img v1.Image) error {
	tags := imagebuild.Tags(*o.version, *o.revision)
	if err := imagebuild.WriteLayout(*o.out, img, *o.repo, tags); err != nil {
		return err
	}
	digest, _ := img.Digest()
	for _, t := range tags {
		fmt.Printf("%s:%s %s → %s\n", *o.repo, t, digest, *o.out)
	}
	if *o.pushTo != "" {
		return pushLayout(*o.out, *o.pushTo)
	}
	return nil
}

// catalog renders the bundle a directory holds into a file-based catalog, validates it, writes
// it as <render>/<package>/catalog.json when asked, and builds the catalog image.
func catalog(args []string) error {
	fs := flag.NewFlagSet("catalog", flag.ExitOnError)
	dir := fs.String("bundle-dir", "bundle", "the bundle directory (manifests/, metadata/)")
	bundleImage := fs.String("bundle-image", "", "the bundle's image reference, e.g. ghcr.io/kaas/kaas-operator-bundle:0.1.0")
	render := fs.String("render", "", "also write the catalog under this directory (<package>/catalog.json)")
	o := outputFlags(fs, "ghcr.io/kaas/kaas-operator-catalog")
	_ = fs.Parse(args)
	if err := o.check(); err != nil {
		return err
	}
	if *bundleImage == "" {
		return fmt.Errorf("-bundle-image is required")
	}
	cat, err := imagebuild.RenderCatalog(*dir, *bundleImage)
	if err != nil {
		return err
	}
	if *render != "" {
		data, err := cat.JSON()
		if err != nil {
			return err
		}
		file := filepath.Join(*render, cat.Package.Name, "catalog.json")
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			return err
		}
		fmt.Printf("catalog %s → %s\n", cat.Package.Name, file)
	}
	img, err := imagebuild.BuildCatalog(cat, o.spec())
	if err != nil {
		return err
	}
	return o.write(img)
}

func verify(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ExitOnError)
	dockerfile := fs.String("dockerfile", "", "the Dockerfile")
	dir := fs.String("layout", "", "OCI layout directory")
	_ = fs.Parse(args)
	df, err := imagebuild.ParseDockerfile(*dockerfile)
	if err != nil {
		return err
	}
	imgs, err := imagebuild.ReadLayout(*dir)
	if err != nil {
		return err
	}
	for _, t := range imgs {
		bad, err := imagebuild.Verify(t.Image, df)
		if err != nil {
			return err
		}
		if len(bad) > 0 {
			return fmt.Errorf("%s does not match %s:\n  %s", t.Name, *dockerfile, joinLines(bad))
		}
		fmt.Printf("%s: matches %s\n", t.Name, *dockerfile)
	}
	return nil
}

func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	dir := fs.String("layout", "", "OCI layout directory")
	to := fs.String("to", "", "repository, host[:port]/path (every tag of the layout is pushed)")
	_ = fs.Parse(args)
	if *dir == "" || *to == "" {
		return fmt.Errorf("-layout and -to are required")
	}
	return pushLayout(*dir, *to)
}

// pushLayout pushes with the credentials of ~/.docker/config.json (docker login, or a CI's
// login action), plain HTTP for localhost and private addresses.
func pushLayout(dir, repo string) error {
	refs, err := imagebuild.Push(dir, repo, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	for _, r := range refs {
		fmt.Printf("pushed %s\n", r)
	}
	return err
}

// serve runs go-containerregistry's registry (manifests in memory, blobs in -dir) until
// SIGTERM. With -ready, it writes its address to that file once it listens.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	dir := fs.String("dir", "", "blob directory (default: in memory)")
	ready := fs.String("ready", "", "write the listening address to this file")
	quiet := fs.Bool("quiet", false, "do not log requests")
	_ = fs.Parse(args)
	opts := []registry.Option{}
	if *dir != "" {
		if err := os.MkdirAll(*dir, 0o755); err != nil {
			return err
		}
		opts = append(opts, registry.WithBlobHandler(registry.NewDiskBlobHandler(*dir)))
	}
	if *quiet {
		opts = append(opts, registry.Logger(log.New(discard{}, "", 0)))
	} else {
		opts = append(opts, registry.Logger(log.New(os.Stderr, "registry: ", log.LstdFlags|log.Lmicroseconds)))
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if *ready != "" {
		if err := os.WriteFile(*ready, []byte(ln.Addr().String()), 0o644); err != nil {
			return err
		}
	}
	log.Printf("registry listening on %s", ln.Addr())
	srv := &http.Server{Handler: registry.New(opts...), ReadHeaderTimeout: 30 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func joinLines(s []string) string {
	out := ""
	for i, l := range s {
		if i > 0 {
			out += "\n  "
		}
		out += l
	}
	return out
}
