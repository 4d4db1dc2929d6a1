launch
../../examples/two-nodes.yaml
--steps
10000000000000
