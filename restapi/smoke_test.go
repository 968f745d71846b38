package restapi

import "testing"

func TestSmoke_SeedExamplesAccepted(t *testing.T) {
	ts := started(t)
	ts.mustPost(pdExample)
	ts.mustPost(chwblExample)
	r := ts.do("GET", lbPath+"/all", "")
	t.Logf("%s", r.body)
}
