sync
--alpha
2
