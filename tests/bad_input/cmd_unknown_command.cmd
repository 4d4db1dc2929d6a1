rnu
examples/two-stage.yaml
