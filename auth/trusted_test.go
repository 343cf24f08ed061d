package auth_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/errcode"
)

// TestTrustedNodeKeys: keys come from a file when one is given, else from
// the store (which also says which writers are engines), else there are
// none; a file that is not a JSON object is invalid_request.
func TestTrustedNodeKeys(t *testing.T) {
	dir := t.TempDir()
	keys, engines, from, err := auth.TrustedNodeKeys("", filepath.Join(dir, "none"))
	if err != nil || keys != nil || engines != nil || !strings.Contains(from, "registered") {
		t.Fatalf("no store: got %v %v %q %v; want no keys, said so", keys, engines, from, err)
	}
	st := auth.Open(filepath.Join(dir, "auth"))
	for _, id := range []struct {
		name string
		role auth.Role
	}{{"n1", auth.RoleNode}, {"eng", auth.RoleEngine}, {"c1", auth.RoleClient}} {
		tenant := ""
		if id.role == auth.RoleClient {
			tenant = "acme"
		}
		if _, err := st.Add(id.name, id.role, tenant); err != nil {
			t.Fatal(err)
		}
	}
	keys, engines, _, err = auth.TrustedNodeKeys("", filepath.Join(dir, "auth"))
	if err != nil || len(keys) != 2 || keys["n1"] == "" || keys["eng"] == "" || !engines["eng"] || engines["n1"] {
		t.Fatalf("store: got keys %v engines %v, %v; want n1 and eng, eng an engine", keys, engines, err)
	}
	file := filepath.Join(dir, "keys.json")
	if err := os.WriteFile(file, []byte(`{"n9":"UKEY"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, engines, from, err = auth.TrustedNodeKeys(file, filepath.Join(dir, "auth"))
	if err != nil || len(keys) != 1 || keys["n9"] != "UKEY" || engines != nil || !strings.Contains(from, file) {
		t.Fatalf("file: got %v %v %q %v; want n9 from the file", keys, engines, from, err)
	}
	if err := os.WriteFile(file, []byte(`[1]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := auth.TrustedNodeKeys(file, ""); !errors.Is(err, errcode.ErrInvalidRequest) {
		t.Fatalf("bad file: got %v, want invalid_request", err)
	}
}
