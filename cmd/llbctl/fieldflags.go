package main

import (
	"errors"

	"github.com/spf13/pflag"

	"github.com/llbproject/llb/rule"
)

// fieldFlags binds command-line flags to serviceArguments keys. A flag writes
// its key only when it was given, so an omitted flag leaves the key out of
// the JSON: LoxiLB's omitempty shape, and on a replace the fc_* keys (whose
// absence means "keep") keep their stored values.
type fieldFlags struct {
	fs      *pflag.FlagSet
	setters []fieldSetter
}

// fieldSetter writes one flag's value into serviceArguments.
type fieldSetter struct {
	flag  string
	apply func(sa *rule.ServiceArguments) error
}

func (f *fieldFlags) add(flag string, apply func(*rule.ServiceArguments) error) {
	f.setters = append(f.setters, fieldSetter{flag: flag, apply: apply})
}

// int64 binds an integer flag.
func (f *fieldFlags) int64(flag, usage string, set func(*rule.ServiceArguments, int64)) {
	p := f.fs.Int64(flag, 0, usage)
	f.add(flag, func(sa *rule.ServiceArguments) error { set(sa, *p); return nil })
}

// boolean binds a boolean flag.
func (f *fieldFlags) boolean(flag, usage string, set func(*rule.ServiceArguments, bool)) {
	p := f.fs.Bool(flag, false, usage)
	f.add(flag, func(sa *rule.ServiceArguments) error { set(sa, *p); return nil })
}

// str binds a string flag.
func (f *fieldFlags) str(flag, usage string, set func(*rule.ServiceArguments, string)) {
	p := f.fs.String(flag, "", usage)
	f.add(flag, func(sa *rule.ServiceArguments) error { set(sa, *p); return nil })
}

// apply writes every given flag into sa and reports every bad value at once.
func (f *fieldFlags) apply(sa *rule.ServiceArguments) error {
	var errs []error
	for _, s := range f.setters {
		if f.fs.Changed(s.flag) {
			if err := s.apply(sa); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// ptr returns a pointer to a copy of v.
func ptr[T any](v T) *T { return &v }
