sync
--algorithm
streaming_diloco
--alpha
2
