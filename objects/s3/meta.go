package s3

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/retainer-gw/retainer/objects"
)

// metaKey is the user-metadata header holding our Info.
const metaKey = "Retainer"

// stored is what rides in the user-metadata header.
type stored struct {
	ETag     string            `json:"e"`
	Size     int64             `json:"s"`
	Version  string            `json:"v"`
	Uploaded int64             `json:"u"` // Unix milliseconds
	HTTP     map[string]string `json:"h,omitempty"`
	Custom   map[string]string `json:"c,omitempty"`
}

func encodeMeta(i objects.Info) (map[string]string, error) {
	j, err := json.Marshal(stored{ETag: i.ETag, Size: i.Size, Version: i.Version, Uploaded: i.Uploaded.UnixMilli(), HTTP: i.HTTPMetadata, Custom: i.CustomMetadata})
	if err != nil {
		return nil, err
	}
	// Header values are ASCII; keys and values of customMetadata are not.
	return map[string]string{metaKey: base64.RawURLEncoding.EncodeToString(j)}, nil
}

// info reads our Info from an object's headers. An object another tool
// put in the bucket has no such header: it answers what S3 knows.
func info(key string, oi minio.ObjectInfo) (objects.Info, error) {
	v := oi.UserMetadata[metaKey]
	if v == "" {
		v = oi.Metadata.Get("X-Amz-Meta-" + metaKey)
	}
	if v == "" {
		size := oi.Size
		if r := oi.Metadata.Get("Content-Range"); r != "" {
			if i := strings.LastIndexByte(r, '/'); i >= 0 {
				if n, err := strconv.ParseInt(r[i+1:], 10, 64); err == nil {
					size = n
				}
			}
		}
		return objects.Info{Key: key, Size: size, ETag: strings.Trim(oi.ETag, `"`), Version: oi.VersionID, Uploaded: oi.LastModified.UTC()}, nil
	}
	j, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return objects.Info{}, fmt.Errorf("objects s3: %q: %w", oi.Key, err)
	}
	var s stored
	if err := json.Unmarshal(j, &s); err != nil {
		return objects.Info{}, fmt.Errorf("objects s3: %q: %w", oi.Key, err)
	}
	return objects.Info{
		Key: key, Size: s.Size, ETag: s.ETag, Version: s.Version,
		Uploaded:     time.UnixMilli(s.Uploaded).UTC(),
		HTTPMetadata: s.HTTP, CustomMetadata: s.Custom,
	}, nil
}
