run
../../examples/two-stage.yaml
--summary-json
out	put.json
