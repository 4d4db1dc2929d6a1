trace
summarize
/dev/zero
