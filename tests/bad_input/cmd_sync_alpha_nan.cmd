sync
--alpha
nan
