package subagent

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/deputy-go/deputy/internal/jsonvalue"
)

// decodeReport gives the Report json.Unmarshal gives, with findings or
// without, for every answer that passes ReportSchema.
func TestDecodeReportAsUnmarshal(t *testing.T) {
	s, err := reportSchema()
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{
		`{"status":"success","summary":"ok"}`,
		`{"summary":"a \"quoted\" \u00e9 line\n","status":"partial"}`,
		`{"status":"failed","summary":"","findings":null}`,
		`{"status":"success","summary":"ok","findings":{"n":1.5,"list":[1,"two",null],"o":{"deep":true}}}`,
	} {
		v, err := jsonvalue.DecodeOnce(raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ValidateValue(v); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		got, err1 := decodeReport(raw)
		want, err2 := decodeAs[Report](raw)
		if err1 != nil || err2 != nil || fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
			t.Errorf("%s: decodeReport %#v (%v), json.Unmarshal %#v (%v)", raw, got, err1, want, err2)
		}
	}
}

// FuzzDecodeReport holds decodeReport to json.Unmarshal for every answer
// that passes ReportSchema, however its strings and keys are written.
func FuzzDecodeReport(f *testing.F) {
	for _, raw := range []string{
		`{"status":"success","summary":"ok"}`, ` {"summary" : "s" , "status" : "failed" , "findings" : null } `,
		`{"st\u0061tus":"success","summary":"ok"}`, `{"status":"succes\u0073","summary":"\ud800"}`,
		"{\"status\":\"partial\",\"summary\":\"\xff\xfe\"}", `{"status":"success","summary":"ok","status":"failed"}`,
		`{"status":"success","summary":"ok","Status":"failed"}`, `{"status":"success","summary":"ok","findings":{}}`,
		`{"status":"success","summary":"ok","findings":{"a":1,"a":2}}`, `{"status":"success","summary":null}`,
		`{"status":"success","summary":"\u0000\/"}`, `{"status":"success","summary":"ok"} x`,
	} {
		f.Add(raw)
	}
	s, err := reportSchema()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if s.ValidateText(t.Context(), raw) != nil {
			return
		}
		got, err1 := decodeReport(raw)
		want, err2 := decodeAs[Report](raw)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: decodeReport %#v (%v), json.Unmarshal %#v (%v)", raw, got, err1, want, err2)
		}
	})
}
