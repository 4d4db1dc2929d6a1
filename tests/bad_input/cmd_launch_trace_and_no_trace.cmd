launch
../../examples/two-nodes.yaml
--no-trace
--trace
out.json
