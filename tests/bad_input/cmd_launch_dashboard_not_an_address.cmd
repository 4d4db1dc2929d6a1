launch
../../examples/two-nodes.yaml
--dashboard
foo
