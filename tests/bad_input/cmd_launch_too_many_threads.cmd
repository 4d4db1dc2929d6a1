launch
../../examples/two-nodes.yaml
--threads
100000
