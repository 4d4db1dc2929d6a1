sync
--algorithm
streaming_diloco
--alpha
nan
