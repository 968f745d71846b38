package restapi

import (
	"strings"
	"testing"
)

// TestEntryShape_KeysAreUnambiguous guards the model: two keys of one object
// that differ only in case would bind unpredictably under encoding/json's
// case-insensitive matching, and encoding/json drops duplicate names silently.
func TestEntryShape_KeysAreUnambiguous(t *testing.T) {
	var walk func(s *shape, path string)
	walk = func(s *shape, path string) {
		for i, a := range s.fields {
			for _, b := range s.fields[i+1:] {
				if strings.EqualFold(a.name, b.name) {
					t.Errorf("%s: keys %q and %q collide", path, a.name, b.name)
				}
			}
			walk(a.shape, joinPath(path, a.name))
		}
		if s.elem != nil {
			walk(s.elem, path+"[]")
		}
	}
	walk(entryShape, "")
}

func TestEntryShape_PromotesEmbeddedGroupsAndMarksNonNull(t *testing.T) {
	sa, ok := entryShape.field("serviceArguments")
	if !ok {
		t.Fatal("no serviceArguments")
	}
	for _, key := range []string{"externalIP", "id", "kvExactMode", "fc_mode", "kvNoneHashSeed"} {
		if _, ok := sa.shape.field(key); !ok {
			t.Errorf("serviceArguments.%s missing from the shape", key)
		}
	}
	if f, _ := sa.shape.field("fc_mode"); !f.nonull {
		t.Error("fc_mode is not marked nonull")
	}
	if f, _ := sa.shape.field("kvExactMode"); f.nonull {
		t.Error("kvExactMode marked nonull; only fc_* refuse null")
	}
	if f, ok := sa.shape.field("KVEXACTMODE"); !ok || f.name != "kvExactMode" {
		t.Error("case-insensitive lookup failed")
	}
	if _, ok := sa.shape.field("kv_exact_mode"); ok {
		t.Error("underscores must be significant")
	}
}
