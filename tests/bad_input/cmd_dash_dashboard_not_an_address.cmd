dash
out.json
--dashboard
foo
