package cloudstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"

	"github.com/spine-run/spine/cloudstore"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/internal/storetest"
	"github.com/spine-run/spine/sessionstore"
)

// s3Stores is the Store's suite's set over versitygw, a real S3-compatible
// server, when SPINE_FLEET_VERSITYGW names its binary (make fleet-test
// builds it); the test is skipped without it. (sessionstore's own tests run
// the suite over file:// and mem://.)
func s3Stores(t *testing.T) storetest.Set {
	t.Helper()
	url, ok := spinetest.S3Server(t)
	if !ok {
		t.Skip("no versitygw: set SPINE_FLEET_VERSITYGW")
	}
	st, err := cloudstore.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	t.Cleanup(func() { st.Close() })
	return storetest.Set{
		Stores: map[string]sessionstore.Store{"s3": st},
		Failed: func(t *testing.T, kind string) { noUploads(t, url) },
	}
}

func TestStoreGenerations(t *testing.T)         { storetest.Generations(t, s3Stores(t).Stores) }
func TestStoreRace(t *testing.T)                { storetest.Race(t, s3Stores(t).Stores) }
func TestPutKeepsNothingOnFailure(t *testing.T) { storetest.PutKeepsNothingOnFailure(t, s3Stores(t)) }
func TestStoreRaceMultipart(t *testing.T)       { storetest.RaceMultipart(t, s3Stores(t).Stores) }
func TestStoreOwnerLimit(t *testing.T)          { storetest.OwnerLimit(t, s3Stores(t)) }
func TestStoreOwnerLimitRace(t *testing.T)      { storetest.OwnerLimitRace(t, s3Stores(t).Stores) }

// noUploads fails the test if the S3 bucket at url holds a multipart
// upload that was neither completed nor aborted.
func noUploads(t *testing.T, url string) {
	t.Helper()
	b, err := blob.OpenBucket(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var client *s3.Client
	if !b.As(&client) {
		t.Fatal("no S3 client")
	}
	name := strings.TrimPrefix(url[:strings.Index(url, "?")], "s3://")
	out, err := client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &name})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Uploads) != 0 {
		t.Errorf("%d multipart uploads left in the bucket", len(out.Uploads))
	}
}

// TestOpen: file:// and mem:// are sessionstore's, s3://, gs:// and
// azblob:// are gocloud's, anything else is refused, saying which schemes
// there are; an error does not print the URL's query.
func TestOpen(t *testing.T) {
	ctx := context.Background()
	for _, url := range []string{"mem://", "file://" + t.TempDir()} {
		st, err := cloudstore.Open(ctx, url)
		if err != nil {
			t.Errorf("Open(%q): %v", url, err)
			continue
		}
		st.Close()
	}
	for url, want := range map[string]string{
		"http://example.invalid/":                 "the scheme must be s3, gs, azblob, file or mem",
		"s3://bucket?no_such_option=secret-value": "opening s3://bucket",
		"file://" + t.TempDir() + "?region=x":     `unknown parameter "region"`,
	} {
		_, err := cloudstore.Open(ctx, url)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret-value") {
			t.Errorf("Open(%q): %v, want an error saying %q", url, err, want)
		}
	}
}
