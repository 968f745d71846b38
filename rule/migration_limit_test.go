package rule_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rule/ruletest"
)

// The migration limit is the rule's migrationLimit, else
// LLB_MIGRATION_LIMIT, else 3; 0 turns migration off; the variable is
// bounded 0–16 and a bad value is refused with ErrEnv.
func TestCompile_MigrationLimitPrecedence(t *testing.T) {
	intp := func(n int) *int { return &n }
	tests := []struct {
		name string
		rule any // serviceArguments.migrationLimit (nil: absent)
		env  *int
		want int
	}{
		{"default", nil, nil, 3},
		{"daemon", nil, intp(5), 5},
		{"daemon off", nil, intp(0), 0},
		{"rule over daemon", 1, intp(5), 1},
		{"rule off", 0, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := ruletest.SingleEntry(t)
			if tt.rule != nil {
				e = e.Set("serviceArguments.migrationLimit", tt.rule)
			}
			var le rule.LoadbalanceEntry
			if err := json.Unmarshal([]byte(e.JSON(t)), &le); err != nil {
				t.Fatal(err)
			}
			if err := rule.Validate(&le); err != nil {
				t.Fatalf("validate: %v", err)
			}
			r, err := rule.NormalizeEntry(&le)
			if err != nil {
				t.Fatal(err)
			}
			c, err := rule.Compile(&r, rule.Defaults{MigrationLimit: tt.env})
			if err != nil {
				t.Fatal(err)
			}
			if c.MigrationLimit != tt.want {
				t.Errorf("MigrationLimit %d; want %d", c.MigrationLimit, tt.want)
			}
		})
	}
	var le rule.LoadbalanceEntry
	if err := json.Unmarshal([]byte(ruletest.SingleEntry(t).Set("serviceArguments.migrationLimit", 17).JSON(t)), &le); err != nil {
		t.Fatal(err)
	}
	if err := rule.Validate(&le); err == nil {
		t.Error("migrationLimit 17 validated; want it refused (0–16)")
	}
	for _, give := range []string{"17", "-1", "three"} {
		_, err := rule.DefaultsFromEnv(func(k string) string {
			if k == rule.EnvMigrationLimit {
				return give
			}
			return ""
		}, 3)
		if !errors.Is(err, rule.ErrEnv) {
			t.Errorf("%s=%q: err %v; want ErrEnv", rule.EnvMigrationLimit, give, err)
		}
	}
	d, err := rule.DefaultsFromEnv(func(k string) string {
		if k == rule.EnvMigrationLimit {
			return "16"
		}
		return ""
	}, 3)
	if err != nil || d.MigrationLimit == nil || *d.MigrationLimit != 16 {
		t.Errorf("%s=16: %v, %v; want 16", rule.EnvMigrationLimit, d.MigrationLimit, err)
	}
}
