package auth

import (
	"encoding/json"
	"os"

	"github.com/paddock-dev/paddock/errcode"
)

// TrustedNodeKeys returns the keys issued to the writers of events (nodes
// and engines): from file (JSON {name: key}) when given, else from the auth
// store in dir when it exists (none otherwise), and says where they came
// from. The store also says which writers are engines (nil otherwise).
// It fails with invalid_request when file cannot be read or is not a JSON
// object of names to keys, and with the store's error when it cannot be
// read.
func TrustedNodeKeys(file, dir string) (map[string]string, map[string]bool, string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, nil, "", errcode.Wrap(errcode.InvalidRequest, err, "node keys file "+file)
		}
		var keys map[string]string
		if err := json.Unmarshal(b, &keys); err != nil {
			return nil, nil, "", errcode.Wrap(errcode.InvalidRequest, err, "node keys file "+file+" is not a JSON object of node ids to keys")
		}
		return keys, nil, "issued, from " + file, nil
	}
	st := Open(dir)
	if !st.Exists() {
		return nil, nil, "as the nodes registered them (no auth store at " + dir + " says which keys were issued)", nil
	}
	keys, err := st.NodeKeys()
	if err != nil {
		return nil, nil, "", err
	}
	ids, err := st.Identities()
	if err != nil {
		return nil, nil, "", err
	}
	engines := map[string]bool{}
	for _, id := range ids {
		if id.Role == RoleEngine || id.Role == RoleAdmin {
			engines[id.Name] = true
		}
	}
	return keys, engines, "issued, from the auth store at " + dir, nil
}
