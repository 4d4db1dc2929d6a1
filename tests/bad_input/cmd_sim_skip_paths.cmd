sim
../../examples/skippipe-geo20.yaml
