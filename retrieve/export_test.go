package retrieve

// The benchmark graph and its vocabulary, for the MCP benchmark of package
// retrieve_test (mcp_bench_test.go), which imports mcpserver and so cannot
// be in package retrieve.
var (
	BuildBenchGraph = buildBenchGraph
	DropBenchGraph  = dropBenchGraph
	BenchNodes      = benchNodes
	BenchAdjectives = benchAdjectives
	BenchNouns      = benchNouns
	Percentiles     = percentiles
)
