// Package deploy holds llb's packaging files, which are not Go: the container
// image (Dockerfile), the systemd unit (llbd.service, llb.sysusers), the
// environment template (llbd.env.example), example rules (examples/) and the
// Grafana dashboard (grafana/llb.json). Its tests check those files against
// the code base: every metric, label and tier the dashboard queries is one
// llb exports, every environment knob the daemon's packages read is listed,
// and every example rule passes the REST layer's validation.
package deploy
