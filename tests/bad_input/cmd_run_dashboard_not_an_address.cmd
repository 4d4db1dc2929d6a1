run
../../examples/two-stage.yaml
--dashboard
foo
