run
../../examples/two-stage.yaml
../../examples/gpipe.yaml
