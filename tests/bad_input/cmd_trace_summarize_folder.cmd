trace
summarize
.
