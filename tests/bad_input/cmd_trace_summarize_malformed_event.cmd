trace
summarize
malformed_trace.json
