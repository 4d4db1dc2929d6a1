trace
summarize
not_a_trace.json
