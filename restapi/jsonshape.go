package restapi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/llbproject/llb/rule"
)

// shape is the JSON shape a Go model type accepts under encoding/json, built
// once from the type by reflection. checkShape walks a generic decoded value
// against it and reports every mismatch, where encoding/json stops at the
// first. Shapes are immutable after construction.
type shape struct {
	kind   shapeKind
	fields []shapeField // kindObject
	elem   *shape       // kindArray, kindStringMap
}

type shapeKind int

const (
	kindObject shapeKind = iota + 1
	kindArray
	kindStringMap
	kindString
	kindInteger
	kindBoolean
)

// String names the JSON type, as in "must be of type integer".
func (k shapeKind) String() string {
	switch k {
	case kindObject:
		return "object"
	case kindArray:
		return "array"
	case kindStringMap:
		return "object"
	case kindString:
		return "string"
	case kindInteger:
		return "integer"
	case kindBoolean:
		return "boolean"
	}
	return "unknown"
}

type shapeField struct {
	name   string // JSON key
	nonull bool   // explicit null refused (`llb:"nonull"`)
	shape  *shape
}

// entryShape is the shape of LoadbalanceEntry. Immutable.
var entryShape = shapeOf(reflect.TypeFor[rule.LoadbalanceEntry]())

// shapeOf builds the shape of t. It panics on a type the model must not use;
// that is a programming error caught by any test.
func shapeOf(t reflect.Type) *shape {
	switch t.Kind() {
	case reflect.Pointer:
		return shapeOf(t.Elem())
	case reflect.String:
		return &shape{kind: kindString}
	case reflect.Bool:
		return &shape{kind: kindBoolean}
	case reflect.Int64:
		return &shape{kind: kindInteger}
	case reflect.Slice:
		return &shape{kind: kindArray, elem: shapeOf(t.Elem())}
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			panic(fmt.Sprintf("restapi: map key %s in model", t.Key()))
		}
		return &shape{kind: kindStringMap, elem: shapeOf(t.Elem())}
	case reflect.Struct:
		s := &shape{kind: kindObject}
		addFields(s, t)
		return s
	}
	panic(fmt.Sprintf("restapi: type %s in model", t))
}

// addFields adds t's JSON fields to s, promoting untagged embedded structs as
// encoding/json does.
func addFields(s *shape, t reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			addFields(s, f.Type)
			continue
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		s.fields = append(s.fields, shapeField{name: name, nonull: f.Tag.Get("llb") == "nonull", shape: shapeOf(f.Type)})
	}
}

// field finds the field a JSON key binds to: an exact match first, else a
// case-insensitive one, as encoding/json does. Underscores are significant.
func (s *shape) field(key string) (shapeField, bool) {
	for _, f := range s.fields {
		if f.name == key {
			return f, true
		}
	}
	for _, f := range s.fields {
		if strings.EqualFold(f.name, key) {
			return f, true
		}
	}
	return shapeField{}, false
}

// checkShape appends a problem for every place v (decoded with UseNumber) does
// not fit s. Unknown object keys are ignored; null fits anything not nonull.
func checkShape(v any, s *shape, path string, out *[]rule.Problem) {
	if v == nil {
		return
	}
	bad := func() {
		*out = append(*out, rule.SchemaProblem(path, rule.CodeInvalidType, "must be of type %s, got %s", s.kind, describeJSON(v)))
	}
	switch s.kind {
	case kindObject:
		obj, ok := v.(map[string]any)
		if !ok {
			bad()
			return
		}
		// Problems come in model field order; a field bound by several keys
		// (e.g. "port" and "Port") has each checked, in key order.
		bound := make(map[string][]string, len(obj))
		for _, key := range sortedKeys(obj) {
			if f, ok := s.field(key); ok {
				bound[f.name] = append(bound[f.name], key)
			}
		}
		for _, f := range s.fields {
			for _, key := range bound[f.name] {
				child := joinPath(path, f.name)
				if obj[key] == nil && f.nonull {
					*out = append(*out, rule.SchemaProblem(child, rule.CodeInvalidType, "must not be null"))
					continue
				}
				checkShape(obj[key], f.shape, child, out)
			}
		}
	case kindStringMap:
		obj, ok := v.(map[string]any)
		if !ok {
			bad()
			return
		}
		for _, key := range sortedKeys(obj) {
			checkShape(obj[key], s.elem, joinPath(path, key), out)
		}
	case kindArray:
		arr, ok := v.([]any)
		if !ok {
			bad()
			return
		}
		for i, item := range arr {
			checkShape(item, s.elem, joinPath(path, strconv.Itoa(i)), out)
		}
	case kindString:
		if _, ok := v.(string); !ok {
			bad()
		}
	case kindBoolean:
		if _, ok := v.(bool); !ok {
			bad()
		}
	case kindInteger:
		n, ok := v.(json.Number)
		if !ok {
			bad()
			return
		}
		if _, err := strconv.ParseInt(n.String(), 10, 64); err != nil {
			*out = append(*out, rule.SchemaProblem(path, rule.CodeInvalidType, "must be an integer within int64, got %s", n))
		}
	}
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// describeJSON names the JSON type of v, with a short excerpt of scalars.
func describeJSON(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		if len(x) > 32 {
			x = x[:32] + "…"
		}
		return fmt.Sprintf("string %q", x)
	case bool:
		return fmt.Sprintf("boolean %t", x)
	case json.Number:
		return "number " + x.String()
	}
	return fmt.Sprintf("%T", v)
}
