package des

import "testing"

// The step model's curves stay within a factor of two of the BLIS fit it
// is calibrated from up to 8k-token prompts and 128-request batches (its
// extra attention and context terms grow beyond), and never fall below
// the hardware bound.
func TestEngineCalibration_StepModelTracksItsReferences(t *testing.T) {
	cs, err := EngineCalibration()
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 {
		t.Fatalf("%d figures; want 2", len(cs))
	}
	for k, c := range cs {
		step, blis, roof := c.Curves[0], c.Curves[2], c.Curves[3]
		limit := []float64{8192, 128}[k]
		for i, p := range step.Points {
			if p.Y < roof.Points[i].Y {
				t.Errorf("%s at %g: %.4f s below the roofline bound %.4f s", c.File, p.X, p.Y, roof.Points[i].Y)
			}
			if p.X <= limit && (p.Y > 2*blis.Points[i].Y || p.Y < blis.Points[i].Y/2) {
				t.Errorf("%s at %g: %.4f s vs BLIS %.4f s; want within 2×", c.File, p.X, p.Y, blis.Points[i].Y)
			}
		}
	}
}
