package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/restapi"
)

// versionPath is llbd's version route.
const versionPath = "/netlox/v1/version"

func (a *app) versionCmd() *cobra.Command {
	var clientOnly bool
	c := &cobra.Command{
		Use:   "version",
		Short: "Print llbctl's version and llbd's",
		Args:  usageArgs(cobra.NoArgs, "llbctl version [--client]"),
		RunE: func(*cobra.Command, []string) error {
			return a.showVersion(clientOnly)
		},
	}
	c.Flags().BoolVar(&clientOnly, "client", false, "print llbctl's version only; do not ask llbd")
	return c
}

// showVersion prints the client's version, then the server's.
func (a *app) showVersion(clientOnly bool) error {
	var body []byte
	var serverErr error
	if !clientOnly {
		body, serverErr = a.get("version", versionPath, nil, errorOpts{})
	}
	if a.opts.output == outputJSON {
		out := struct {
			Client string          `json:"client"`
			Server json.RawMessage `json:"server,omitempty"`
		}{Client: buildVersion(), Server: body}
		if err := writeValue(a.stdout, out); err != nil {
			return err
		}
		return serverErr
	}
	fmt.Fprintf(a.stdout, "llbctl %s\n", buildVersion())
	if clientOnly || serverErr != nil {
		return serverErr
	}
	var v restapi.VersionView
	if err := decode("version", body, &v); err != nil {
		return err
	}
	writes := "yes"
	if !v.WritesAccepted {
		writes = "no (restoring)"
	}
	_, err := fmt.Fprintf(a.stdout, "llbd %s (data plane: %s; writes accepted: %s)\n", sanitize(v.Version), sanitize(v.DataPlane), writes)
	return err
}
