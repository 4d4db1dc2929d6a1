run
../../examples/two-stage.yaml
--trace
out.json
--no-trace
