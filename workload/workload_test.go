package workload_test

import (
	"context"
	"testing"

	"go.uber.org/zap/zaptest"

	"graphsync/internal/teststack"
	"graphsync/workload"
)

func TestRunDefault(t *testing.T) {
	_, pool := teststack.FreshDatabase(t)
	report, err := workload.Run(context.Background(), pool, workload.Config{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", report)
}
