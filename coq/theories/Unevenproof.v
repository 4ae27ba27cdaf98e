(** Proofs about uneven dimensions ([Uneven.v]): the blocks of a dimension
    partition it, the uneven model extends the even one, the memory each
    convention allocates, and the data semantics of gathers, slices and
    all-to-alls on padded buffers: no padding element ever reaches a valid
    position. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Semantics Uneven.
Import ListNotations.

(** * Block size [ceil(g / n)] *)

Lemma csize_spec : forall g n, 0 < n -> g <= n * csize g n /\ n * csize g n < g + n.
Proof.
  intros g n Hn. unfold csize.
  pose proof (Nat.div_mod (g + (n - 1)) n ltac:(lia)) as Hdm.
  pose proof (Nat.mod_upper_bound (g + (n - 1)) n ltac:(lia)) as Hmb.
  lia.
Qed.

(** The Galois connection that characterises the ceiling. *)
Lemma csize_le_iff : forall g n k, 0 < n -> (csize g n <= k <-> g <= k * n).
Proof.
  intros g n k Hn. pose proof (csize_spec g n Hn) as [H1 H2]. split; intros Hk.
  - nia.
  - unfold csize. apply Nat.lt_succ_r, Nat.div_lt_upper_bound; nia.
Qed.

Lemma csize_pos : forall g n, 0 < g -> 0 < n -> 0 < csize g n.
Proof. intros g n Hg Hn. pose proof (csize_spec g n Hn). destruct (csize g n); lia. Qed.

Lemma csize_le_g : forall g n, 0 < n -> csize g n <= g.
Proof. intros g n Hn. apply csize_le_iff; nia. Qed.

Lemma csize_one : forall g, csize g 1 = g.
Proof. intros g. unfold csize. rewrite Nat.sub_diag, Nat.add_0_r, Nat.div_1_r. reflexivity. Qed.

(** Blocking by [a * b] is blocking by [a], then each block by [b]. *)
Lemma csize_mul : forall g a b, 0 < a -> 0 < b -> csize g (a * b) = csize (csize g a) b.
Proof.
  intros g a b Ha Hb.
  assert (Hiff : forall k, csize g (a * b) <= k <-> csize (csize g a) b <= k).
  { intros k. rewrite !csize_le_iff by nia. split; intros H; nia. }
  apply Nat.le_antisymm; apply Hiff; lia.
Qed.

(** Even case: [ceil(g / n) = g / n]. *)
Theorem csize_even : forall g n, 0 < n -> Nat.divide n g -> csize g n = g / n.
Proof.
  intros g n Hn [z ->]. unfold csize.
  rewrite Nat.div_mul by lia. rewrite Nat.div_add_l by lia.
  rewrite Nat.div_small by lia. lia.
Qed.

(** * The blocks of one dimension *)

(** The valid length is at most the block size. *)
Theorem uvalid_le : forall g n b, uvalid g n b <= csize g n.
Proof. intros g n b. unfold uvalid. simpl. lia. Qed.

(** Blocks before the last non-empty one are full; those past [g] are empty. *)
Lemma uvalid_full : forall g n b, S b * csize g n <= g -> uvalid g n b = csize g n.
Proof. intros g n b H. unfold uvalid. simpl in *. lia. Qed.

Lemma uvalid_empty : forall g n b, g <= b * csize g n -> uvalid g n b = 0.
Proof. intros g n b H. unfold uvalid. simpl. lia. Qed.

(** A position of a padded block is valid iff the global index it stands for
    is below [g]. *)
Lemma uvalid_iff : forall g n b k, k < uvalid g n b <-> k < csize g n /\ b * csize g n + k < g.
Proof. intros g n b k. unfold uvalid. simpl. lia. Qed.

(** Every index of [0, g) is in the valid part of block [x / c], one of the [n]. *)
Theorem ublock_cover : forall g n x, 0 < n -> x < g ->
  x / csize g n < n /\ in_ublock g n (x / csize g n) x.
Proof.
  intros g n x Hn Hx. pose proof (csize_spec g n Hn) as [H1 H2].
  assert (Hc : 0 < csize g n) by (apply csize_pos; lia).
  pose proof (Nat.div_mod x (csize g n) ltac:(lia)) as Hdm.
  pose proof (Nat.mod_upper_bound x (csize g n) ltac:(lia)) as Hmb.
  split.
  - apply Nat.div_lt_upper_bound; lia.
  - unfold in_ublock, ustart, uvalid. simpl. set (q := x / csize g n) in *. nia.
Qed.

(** No index is in two blocks. *)
Theorem ublock_disjoint : forall g n b b' x, in_ublock g n b x -> in_ublock g n b' x -> b = b'.
Proof.
  intros g n b b' x. unfold in_ublock, ustart, uvalid. simpl.
  set (c := csize g n). intros H1 H2.
  destruct (Nat.lt_trichotomy b b') as [Hlt|[Heq|Hlt]]; auto; exfalso.
  - assert (S b * c <= b' * c) by (apply Nat.mul_le_mono_r; lia). simpl in *. lia.
  - assert (S b' * c <= b * c) by (apply Nat.mul_le_mono_r; lia). simpl in *. lia.
Qed.

(** Blocks come in order: every index of an earlier block is smaller. *)
Theorem ublock_order : forall g n b b' x y, b < b' ->
  in_ublock g n b x -> in_ublock g n b' y -> x < y.
Proof.
  intros g n b b' x y Hb. unfold in_ublock, ustart, uvalid. simpl.
  set (c := csize g n). intros H1 H2.
  assert (S b * c <= b' * c) by (apply Nat.mul_le_mono_r; lia). simpl in *. lia.
Qed.

Lemma uvalid_prefix_sum : forall g n k,
  fold_right plus 0 (map (uvalid g n) (seq 0 k)) = Nat.min g (k * csize g n).
Proof.
  intros g n k. induction k as [|k IH]; [simpl; lia|].
  rewrite seq_S, map_app, fold_plus_app, IH. simpl. unfold uvalid. simpl.
  set (c := csize g n). lia.
Qed.

(** The valid lengths of the [n] blocks add up to [g]: with the three
    theorems above, the valid blocks partition [0, g), in order. *)
Theorem uvalid_sum : forall g n, 0 < n -> fold_right plus 0 (map (uvalid g n) (seq 0 n)) = g.
Proof.
  intros g n Hn. rewrite uvalid_prefix_sum. pose proof (csize_spec g n Hn). lia.
Qed.

(** Valid parts lie in [0, g), and only the [n] blocks have one. *)
Theorem in_ublock_range : forall g n b x, 0 < n -> in_ublock g n b x -> x < g /\ b < n.
Proof.
  intros g n b x Hn. unfold in_ublock, ustart, uvalid. simpl.
  pose proof (csize_spec g n Hn) as [H1 H2]. set (c := csize g n) in *. intros Hx.
  split; [lia|]. destruct (Nat.lt_ge_cases b n) as [Hb|Hb]; auto.
  assert (n * c <= b * c) by (apply Nat.mul_le_mono_r; lia). lia.
Qed.

(** The partition in one statement: every index of [0, g) is in the valid
    part of exactly one of the [n] blocks, and in nothing else. *)
Theorem ublocks_partition : forall g n x, 0 < n ->
  (x < g <-> exists b, b < n /\ in_ublock g n b x) /\
  (forall b b', in_ublock g n b x -> in_ublock g n b' x -> b = b').
Proof.
  intros g n x Hn. split; [split|].
  - intros Hx. exists (x / csize g n). apply ublock_cover; auto.
  - intros [b [_ Hb]]. apply (in_ublock_range g n b x Hn Hb).
  - intros b b' H1 H2. exact (ublock_disjoint g n b b' x H1 H2).
Qed.

(** The example of the two conventions: [g = 5] over [n = 4] blocks of 2. *)
Example uvalid_5_4 : map (uvalid 5 4) (seq 0 4) = [2; 2; 1; 0] /\ csize 5 4 = 2.
Proof. split; reflexivity. Qed.

(** Padding per dimension: [n] padded blocks hold fewer than [g + n] positions. *)
Theorem csize_padding : forall g n, 0 < n -> g <= n * csize g n < g + n.
Proof. intros. apply csize_spec; auto. Qed.

(** Even case: every block is full and starts where the even model's does. *)
Theorem uvalid_even : forall g n b, 0 < n -> Nat.divide n g -> b < n -> uvalid g n b = g / n.
Proof.
  intros g n b Hn Hd Hb. rewrite <- (csize_even g n Hn Hd). apply uvalid_full.
  rewrite (csize_even g n Hn Hd). destruct Hd as [z ->]. rewrite Nat.div_mul by lia. nia.
Qed.

(** * Consistency of a blocking with a finer one *)

(** The non-example: [g = 5] over 2 blocks of 3 and over 4 blocks of 2. *)
Example split_ok_5_2_2 : ~ split_ok 2 (csize 5 2) 5.
Proof. unfold split_ok. simpl. intros [[z Hz]|H]; lia. Qed.

(** Cutting the coarse blocks (size [C]) into [N] finer ones (size [csize C N]):
    under [split_ok], at any index valid in either blocking, coarse block [b]
    starts where its first fine block [b * N] does. *)
Lemma split_start : forall N C g b k r, 0 < N ->
  split_ok N C g -> k < N -> r < csize C N ->
  (b * C + (k * csize C N + r) < g \/ (b * N + k) * csize C N + r < g) ->
  b * C = b * N * csize C N.
Proof.
  intros N C g b k r HN Hok Hk Hr Hv.
  pose proof (csize_spec C N HN) as [H1 H2].
  destruct Hok as [Hd|Hg].
  - rewrite (csize_even C N HN Hd). destruct Hd as [z ->]. rewrite Nat.div_mul by lia. ring.
  - destruct b as [|b]; [lia|]. exfalso. destruct Hv as [Hv|Hv]; nia.
Qed.

(** * Multi-dimensional types *)

Lemma wf_uneven_dimb_spec : forall m D, wf_uneven_dimb m D = true <-> wf_uneven_dim m D.
Proof.
  intros m D. unfold wf_uneven_dimb, wf_uneven_dim.
  rewrite andb_true_iff, Nat.ltb_lt, forallb_forall. split.
  - intros [Hg Ha]. split; auto. intros a Hin. apply Nat.ltb_lt, Ha; auto.
  - intros [Hg Ha]. split; auto. intros a Hin. apply Nat.ltb_lt, Ha; auto.
Qed.

Theorem wf_unevenb_spec : forall m t, wf_unevenb m t = true <-> wf_uneven m t.
Proof.
  intros m t. unfold wf_unevenb, wf_uneven. rewrite !andb_true_iff, wf_meshb_spec, nodupb_spec,
    forallb_forall, Forall_forall. split.
  - intros [[Hm Hd] Hn]. split; [exact Hm|split; [|exact Hn]].
    intros D HD. apply wf_uneven_dimb_spec; auto.
  - intros [Hm [Hd Hn]]. split; [split; [exact Hm|]|exact Hn].
    intros D HD. apply wf_uneven_dimb_spec; auto.
Qed.

(** Every well-formed (even) type is a well-formed uneven type. *)
Theorem wf_uneven_of_wf : forall m t, wf m t -> wf_uneven m t.
Proof.
  intros m t [Hm [HF Hn]]. split; [auto|split; auto].
  eapply Forall_impl; [|exact HF]. intros D [Hg [Ha _]]. split; auto.
Qed.

Lemma wf_uneven_nth : forall m t d D, wf_uneven m t -> nth_error t d = Some D -> wf_uneven_dim m D.
Proof.
  intros m t d D [_ [HF _]] HD. rewrite Forall_forall in HF. apply HF.
  eapply nth_error_In; eauto.
Qed.

Lemma nprod_pos_dim : forall m D, wf_mesh m -> wf_uneven_dim m D -> 0 < nprod m (axes D).
Proof. intros m D Hm [_ Ha]. apply nprod_pos; auto. Qed.

Lemma block_lt : forall m D c, wf_uneven_dim m D -> valid m c -> block m D c < nprod m (axes D).
Proof. intros m D c [_ Ha] Hc. apply mr_lt. intros a Hin. apply Hc, Ha, Hin. Qed.

(** Per dimension, the uneven functions are the even ones when [n] divides [g]. *)
Theorem ucsize_lsize : forall m D, wf_mesh m -> wf_dim m D -> ucsize m D = lsize m D.
Proof.
  intros m D Hm [Hg [Ha Hd]]. unfold ucsize, lsize. apply csize_even; auto.
  apply nprod_pos; auto.
Qed.

Theorem uvlen_lsize : forall m D c, wf_mesh m -> wf_dim m D -> valid m c -> uvlen m D c = lsize m D.
Proof.
  intros m D c Hm HD Hc. pose proof HD as [Hg [Ha Hd]]. unfold uvlen, lsize. apply uvalid_even; auto.
  - apply nprod_pos; auto.
  - apply block_lt; [split; auto|auto].
Qed.

Theorem ugidx_gidx : forall m D c k, wf_mesh m -> wf_dim m D -> ugidx m D c k = gidx m D c k.
Proof. intros m D c k Hm HD. unfold ugidx, gidx. rewrite ucsize_lsize; auto. Qed.

Lemma ulen_lsize : forall cv m D c, wf_mesh m -> wf_dim m D -> valid m c -> ulen cv m D c = lsize m D.
Proof.
  intros [|] m D c Hm HD Hc; unfold ulen, ubuf.
  - apply ucsize_lsize; auto.
  - apply uvlen_lsize; auto.
Qed.

(** A valid position is one of the padded buffer whose global index is in range. *)
Lemma uvlen_iff : forall m D c k, k < uvlen m D c <-> k < ucsize m D /\ ugidx m D c k < gsize D.
Proof. intros. unfold uvlen, ugidx, ucsize. apply uvalid_iff. Qed.

Lemma uvlen_le : forall m D c, uvlen m D c <= ucsize m D.
Proof. intros. apply uvalid_le. Qed.

(** Positions as lists: lengths and per-dimension bounds. *)
Lemma urange_iff : forall cv m t c i, urange cv m t c i <->
  length i = length t /\ forall j, j < length t -> nth j i 0 < ulen cv m (nth j t dflt) c.
Proof. intros. exact (Forall2_nth_iff _ _ (fun D k => k < ulen cv m D c) t i dflt 0). Qed.

Lemma uvalid_pos_iff : forall m t c i, uvalid_pos m t c i <->
  length i = length t /\ forall j, j < length t -> nth j i 0 < uvlen m (nth j t dflt) c.
Proof. intros. exact (Forall2_nth_iff _ _ (fun D k => k < uvlen m D c) t i dflt 0). Qed.

(** The positions of the chunked buffer are exactly the valid positions. *)
Theorem urange_chunked_valid : forall m t c i, urange Chunked m t c i <-> uvalid_pos m t c i.
Proof. intros. unfold urange, uvalid_pos, ulen, uvlen, ubuf. reflexivity. Qed.

Lemma uvalid_pos_padded : forall m t c i, uvalid_pos m t c i -> urange Padded m t c i.
Proof.
  unfold uvalid_pos, urange. intros m t c i H. induction H as [|D k t i Hk _ IH]; constructor; auto.
  unfold ulen, ubuf. pose proof (uvlen_le m D c) as Hle. unfold ucsize in Hle. lia.
Qed.

Lemma uvalid_posb_spec : forall m t c i, uvalid_posb m t c i = true <-> uvalid_pos m t c i.
Proof.
  intros m t c. unfold uvalid_posb, uvalid_pos.
  induction t as [|D t IH]; intros [|k i]; simpl.
  - split; auto.
  - split; [discriminate|intros H; inversion H].
  - split; [discriminate|intros H; inversion H].
  - rewrite !andb_true_iff, Nat.ltb_lt. split.
    + intros [Hl [Hk Hr]]. constructor; auto. apply IH. rewrite andb_true_iff. auto.
    + intros H. inversion H as [|? ? ? ? Hk Hr]; subst. apply IH in Hr.
      rewrite andb_true_iff in Hr. tauto.
Qed.

Lemma ugindex_nth : forall m t c i j, j < length t -> j < length i ->
  nth j (ugindex m t c i) 0 = ugidx m (nth j t dflt) c (nth j i 0).
Proof.
  intros m t c. unfold ugindex.
  induction t as [|D t IH]; intros [|k i] [|j] Hj Hi; simpl in *; try lia; auto.
  apply IH; lia.
Qed.

Lemma ugindex_length : forall m t c i, length i = length t -> length (ugindex m t c i) = length t.
Proof. intros. unfold ugindex. rewrite map_length, combine_length. lia. Qed.

Lemma ugindex_ext : forall m t c i t' c' i',
  length i = length t -> length t' = length t -> length i' = length t ->
  (forall j, j < length t -> ugidx m (nth j t dflt) c (nth j i 0) = ugidx m (nth j t' dflt) c' (nth j i' 0)) ->
  ugindex m t c i = ugindex m t' c' i'.
Proof.
  intros m t c i t' c' i' H1 H2 H3 H. apply nth_ext with (d := 0) (d' := 0).
  - rewrite !ugindex_length; lia.
  - intros j Hj. rewrite ugindex_length in Hj by auto. rewrite !ugindex_nth by lia. auto.
Qed.

(** For even types, global indices and valid positions are those of [Semantics]. *)
Lemma wf_nth_dflt : forall m t j, wf m t -> j < length t -> wf_dim m (nth j t dflt).
Proof. intros m t j Ht Hj. eapply wf_nth; [exact Ht|]. apply nth_error_nth'; auto. Qed.

Theorem ugindex_gindex : forall m t c i, wf m t -> ugindex m t c i = gindex m t c i.
Proof.
  intros m t c i Ht. unfold ugindex, gindex. apply map_ext_in. intros [D k] HDk.
  apply in_combine_l in HDk. simpl. apply ugidx_gidx; [apply Ht|].
  destruct Ht as [_ [HF _]]. rewrite Forall_forall in HF. auto.
Qed.

Theorem uvalid_pos_even : forall m t c i, wf m t -> valid m c -> (uvalid_pos m t c i <-> in_range m t i).
Proof.
  intros m t c i Ht Hc. rewrite uvalid_pos_iff, in_range_iff.
  split; intros [Hl Hb]; split; auto; intros j Hj; specialize (Hb j Hj);
    rewrite uvlen_lsize in *; auto; try apply Ht; apply wf_nth_dflt; auto.
Qed.

(** * Memory *)

(** Under [Padded] every device allocates [usize_padded]. *)
Lemma usize_padded_eq : forall m t c, usize Padded m t c = usize_padded m t.
Proof. reflexivity. Qed.

Lemma prod_le_map : forall {A} (f g : A -> nat) l, (forall x, In x l -> f x <= g x) ->
  prod (map f l) <= prod (map g l).
Proof.
  intros A f g l. induction l as [|x l IH]; simpl; intros H; auto.
  unfold prod in *; simpl. apply Nat.mul_le_mono; auto.
Qed.

(** A chunked buffer is never larger than the padded one. *)
Theorem usize_chunked_le : forall m t c, usize Chunked m t c <= usize_padded m t.
Proof. intros m t c. apply prod_le_map. intros D _. apply uvlen_le. Qed.

Lemma set_digits_rev_zero : forall m RA c k a, k = 0 -> c a = 0 -> set_digits_rev m RA c k a = 0.
Proof.
  intros m RA. induction RA as [|b RA IH]; intros c k a Hk Ha; simpl; auto. subst k. apply IH.
  - destruct (asize m b); reflexivity.
  - unfold upd. destruct (Nat.eqb_spec a b); auto. destruct (asize m b); [reflexivity|].
    apply Nat.mod_0_l. lia.
Qed.

Lemma coords_of_rank_0 : forall m a, coords_of_rank m 0 a = 0.
Proof. intros. unfold coords_of_rank, set_digits. apply set_digits_rev_zero; auto. Qed.

Lemma umr_zero : forall m A c, (forall a, In a A -> c a = 0) -> mr m A c = 0.
Proof.
  intros m A c H. rewrite (mr_ext m A c (fun _ => 0)) by auto.
  induction A as [|a A IH] using rev_ind; auto.
  rewrite mr_app, mr_single, IH by (intros; apply H, in_or_app; auto). lia.
Qed.

(** The device of rank 0 holds block 0 everywhere, which is full. *)
Lemma usize_rank0 : forall m t, wf_uneven m t -> usize Chunked m t (coords_of_rank m 0) = usize_padded m t.
Proof.
  intros m t [Hm [HF _]]. unfold usize, usize_padded. f_equal. apply map_ext_in.
  intros D HD. rewrite Forall_forall in HF. specialize (HF D HD).
  unfold ulen, ubuf, ucsize. unfold block. rewrite umr_zero by (intros; apply coords_of_rank_0).
  apply uvalid_full. simpl. rewrite Nat.add_0_r. apply csize_le_g, nprod_pos_dim; auto.
Qed.

Lemma ufold_max_ge : forall l x, In x l -> x <= fold_right Nat.max 0 l.
Proof. induction l as [|y l IH]; simpl; intros x Hx; [contradiction|]. destruct Hx as [<-|Hx]; [lia|]. specialize (IH x Hx). lia. Qed.

Lemma ufold_max_le : forall l k, (forall x, In x l -> x <= k) -> fold_right Nat.max 0 l <= k.
Proof. induction l as [|y l IH]; simpl; intros k H; [lia|]. pose proof (H y (or_introl eq_refl)). pose proof (IH k (fun x Hx => H x (or_intror Hx))). lia. Qed.

Lemma undevices_pos : forall m, wf_mesh m -> 0 < ndevices m.
Proof.
  intros m Hm. rewrite <- nprod_all_axes. apply nprod_pos; auto.
  intros a Ha. apply in_seq in Ha. lia.
Qed.

(** The honest memory bound: under [Padded] every device allocates the
    product of the block sizes [ceil(g / n)]; under [Chunked] device [c]
    allocates the product of its valid lengths, and the most any device
    allocates is again the product of the block sizes (the device of rank 0
    holds the full first block of every dimension). *)
Theorem usize_max_padded : forall cv m t, wf_uneven m t -> usize_max cv m t = usize_padded m t.
Proof.
  intros cv m t Ht. pose proof Ht as [Hm _]. apply Nat.le_antisymm.
  - apply ufold_max_le. intros x Hx. apply in_map_iff in Hx. destruct Hx as [r [<- _]].
    destruct cv; [rewrite usize_padded_eq; lia|apply usize_chunked_le].
  - destruct cv; [|rewrite <- usize_rank0 by auto];
      (eapply Nat.le_trans; [|apply ufold_max_ge, in_map_iff; exists 0; split;
        [reflexivity|apply in_seq; pose proof (undevices_pos m Hm); lia]]);
      [rewrite usize_padded_eq|]; lia.
Qed.

(** For even types both conventions allocate [Types.size]. *)
Theorem usize_even : forall cv m t c, wf m t -> valid m c -> usize cv m t c = size m t.
Proof.
  intros cv m t c Ht Hc. rewrite size_prod. unfold usize. f_equal. apply map_ext_in. intros D HD.
  apply ulen_lsize; auto; [apply Ht|]. destruct Ht as [_ [HF _]]. rewrite Forall_forall in HF. auto.
Qed.

(** A padded gather first concatenates [N] input blocks along the gathered
    dimension: at least the output block, and less than [N] more; exactly the
    output block when [N] divides it. *)
Theorem ugather_buf_bound : forall m P xs g, wf_mesh m ->
  wf_uneven_dim m (mkdim (P ++ xs) g) ->
  ucsize m (mkdim P g) <= ugather_buf m (mkdim (P ++ xs) g) xs < ucsize m (mkdim P g) + nprod m xs /\
  (Nat.divide (nprod m xs) (ucsize m (mkdim P g)) ->
   ugather_buf m (mkdim (P ++ xs) g) xs = ucsize m (mkdim P g)).
Proof.
  intros m P xs g Hm [Hg Ha]. simpl in Ha.
  assert (HP : 0 < nprod m P) by (apply nprod_pos; auto; intros; apply Ha, in_or_app; auto).
  assert (Hx : 0 < nprod m xs) by (apply nprod_pos; auto; intros; apply Ha, in_or_app; auto).
  unfold ugather_buf, ucsize. simpl. rewrite nprod_app, csize_mul by auto.
  pose proof (csize_spec (csize g (nprod m P)) (nprod m xs) Hx). split; [lia|].
  intros Hd. rewrite csize_even by auto. destruct Hd as [z Hz]. rewrite Hz, Nat.div_mul by lia. ring.
Qed.

(** * Data semantics on padded buffers *)

(** One dimension of a gather: output position [p] of coarse block [bP] is
    position [p mod l] of member [p / l] (fine block [bP * N + p / l]). *)
Lemma gather_dim : forall N C g bP p, 0 < N -> split_ok N C g -> p < C -> bP * C + p < g ->
  p / csize C N < N /\ p mod csize C N < csize C N /\
  (bP * N + p / csize C N) * csize C N + p mod csize C N = bP * C + p.
Proof.
  intros N C g bP p HN Hok Hp Hv.
  set (l := csize C N).
  assert (Hl : 0 < l) by (apply csize_pos; lia).
  pose proof (csize_spec C N HN) as [H1 H2]. fold l in H1, H2.
  pose proof (Nat.div_mod p l ltac:(lia)) as Hdm.
  pose proof (Nat.mod_upper_bound p l ltac:(lia)) as Hmb.
  assert (Hj : p / l < N) by (apply Nat.div_lt_upper_bound; lia).
  split; [exact Hj|split; [exact Hmb|]].
  assert (Hs : bP * C = bP * N * l).
  { apply (split_start N C g bP (p / l) (p mod l)); auto. left. fold l. lia. }
  rewrite Hs. nia.
Qed.

(** One dimension of a slice: output position [p] of fine block [bA * N + k]
    is position [k * l + p] of coarse block [bA], inside the coarse buffer. *)
Lemma slice_dim : forall N C g bA k p, 0 < N -> split_ok N C g -> k < N -> p < csize C N ->
  (bA * N + k) * csize C N + p < g ->
  k * csize C N + p < C /\ bA * C + (k * csize C N + p) = (bA * N + k) * csize C N + p.
Proof.
  intros N C g bA k p HN Hok Hk Hp Hv.
  assert (Hs : bA * C = bA * N * csize C N) by (apply (split_start N C g bA k p); auto).
  split; [|rewrite Hs; ring].
  destruct Hok as [Hd|Hg].
  - assert (E : C = N * csize C N).
    { rewrite (csize_even C N HN Hd). destruct Hd as [z ->]. rewrite Nat.div_mul by lia. ring. }
    rewrite E at 2. nia.
  - assert (bA * C + (k * csize C N + p) = (bA * N + k) * csize C N + p) by (rewrite Hs; ring).
    lia.
Qed.

(** Assembling the dimensions. *)
Lemma assemble : forall m t t' c i c' i',
  length t' = length t -> length i = length t -> length i' = length t ->
  (forall j, j < length t -> nth j i' 0 < uvlen m (nth j t dflt) c' /\
      ugidx m (nth j t dflt) c' (nth j i' 0) = ugidx m (nth j t' dflt) c (nth j i 0)) ->
  uvalid_pos m t c' i' /\ ugindex m t c' i' = ugindex m t' c i.
Proof.
  intros m t t' c i c' i' Hl1 Hl2 Hl3 H. split.
  - apply uvalid_pos_iff. split; auto. intros j Hj. apply H; auto.
  - apply ugindex_ext; auto. intros j Hj. apply H; auto.
Qed.

Lemma block_set_digits_other : forall m D xs c k,
  (forall a, In a xs -> ~ In a (axes D)) -> block m D (set_digits m xs c k) = block m D c.
Proof.
  intros m D xs c k H. unfold block. apply mr_ext. intros a Ha. apply set_digits_other.
  intro Hx. apply (H a Hx Ha).
Qed.

(** Changing coordinates on axes of dimension [d] leaves the blocks of the others alone. *)
Lemma block_other : forall m t d Dd xs c k j, NoDup (used t) -> nth_error t d = Some Dd ->
  (forall a, In a xs -> In a (axes Dd)) -> j <> d -> j < length t ->
  block m (nth j t dflt) (set_digits m xs c k) = block m (nth j t dflt) c.
Proof.
  intros m t d Dd xs c k j Hnd HD Hxs Hjd Hj. apply block_set_digits_other.
  intros a Ha Hin. apply (used_disj t j d (nth j t dflt) Dd a); auto.
  apply nth_error_nth'; auto.
Qed.

Lemma ugidx_uvlen_block : forall m D c c' k, block m D c' = block m D c ->
  ugidx m D c' k = ugidx m D c k /\ uvlen m D c' = uvlen m D c.
Proof. intros m D c c' k H. unfold ugidx, uvlen. rewrite H. auto. Qed.

Lemma ucsize_app : forall m A xs g, wf_mesh m -> (forall a, In a (A ++ xs) -> a < length m) ->
  ucsize m (mkdim (A ++ xs) g) = csize (ucsize m (mkdim A g)) (nprod m xs).
Proof.
  intros m A xs g Hm Ha. unfold ucsize. simpl. rewrite nprod_app. apply csize_mul.
  - apply nprod_pos; auto. intros; apply Ha, in_or_app; auto.
  - apply nprod_pos; auto. intros; apply Ha, in_or_app; auto.
Qed.

Lemma nodup_axes : forall m t d D, wf_uneven m t -> nth_error t d = Some D -> NoDup (axes D).
Proof. intros m t d D [_ [_ Hnd]] HD. apply (nodup_used_axes t d D Hnd HD). Qed.

Lemma usound_gather : forall m t d xs P g c i,
  wf_uneven m t -> nth_error t d = Some (mkdim (P ++ xs) g) ->
  split_ok (nprod m xs) (ucsize m (mkdim P g)) g -> valid m c ->
  uvalid_pos m (set_nth t d (mkdim P g)) c i ->
  exists c' i', usource m t (AllGather d xs) (set_nth t d (mkdim P g)) c i = Some (c', i') /\
    valid m c' /\ uvalid_pos m t c' i' /\ ugindex m t c' i' = ugindex m (set_nth t d (mkdim P g)) c i.
Proof.
  intros m t d xs P g c i Ht HD Hok Hc Hi.
  assert (Hm : wf_mesh m) by apply Ht.
  pose proof (wf_uneven_nth m t d _ Ht HD) as [Hg HA]. simpl in HA.
  assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
  assert (HnD : nth d t dflt = mkdim (P ++ xs) g) by (apply nth_error_nth; auto).
  pose proof (nodup_axes m t d _ Ht HD) as Hnd. simpl in Hnd.
  apply NoDup_app_inv in Hnd. destruct Hnd as [HndP [Hndx Hdisj]].
  assert (HxL : forall a, In a xs -> a < length m) by (intros; apply HA, in_or_app; auto).
  assert (HN : 0 < nprod m xs) by (apply nprod_pos; auto).
  unfold usource. rewrite HnD. eexists _, _. split; [reflexivity|].
  set (C := ucsize m (mkdim P g)). set (p := nth d i 0).
  assert (El : ucsize m (mkdim (P ++ xs) g) = csize C (nprod m xs)) by (apply ucsize_app; auto).
  rewrite El.
  apply uvalid_pos_iff in Hi. rewrite set_nth_length in Hi. destruct Hi as [Hlen Hb].
  assert (Hp : p < C /\ ugidx m (mkdim P g) c p < g).
  { specialize (Hb d Hdl). rewrite nth_set_nth_eq in Hb by auto. apply uvlen_iff in Hb. exact Hb. }
  destruct Hp as [Hp Hv]. unfold ugidx in Hv. fold C in Hv. unfold block in Hv. simpl axes in Hv.
  destruct (gather_dim (nprod m xs) C g (mr m P c) p HN Hok Hp Hv) as [Hj [Hr Heq]].
  set (c' := set_digits m xs c (p / csize C (nprod m xs))).
  split; [apply set_digits_valid; auto|].
  apply assemble; rewrite ?set_nth_length; auto.
  intros j Hj'. destruct (Nat.eq_dec j d) as [->|Hne].
  - rewrite !nth_set_nth_eq by lia. rewrite HnD.
    assert (Hblk : block m (mkdim (P ++ xs) g) c' = mr m P c * nprod m xs + p / csize C (nprod m xs)).
    { unfold block, c'. simpl axes. rewrite mr_app, set_digits_mr by (auto; intros; apply Hm; auto).
      rewrite (mr_ext m P (set_digits m xs c _) c); auto.
      intros a Ha. apply set_digits_other. apply Hdisj; auto. }
    assert (Hgi : ugidx m (mkdim (P ++ xs) g) c' (p mod csize C (nprod m xs)) = ugidx m (mkdim P g) c p).
    { unfold ugidx. rewrite Hblk, El. fold C. rewrite Heq. reflexivity. }
    split; [|exact Hgi].
    apply uvlen_iff. rewrite El, Hgi. split; [exact Hr|exact Hv].
  - rewrite !nth_set_nth_neq by auto.
    assert (Hbo : block m (nth j t dflt) c' = block m (nth j t dflt) c).
    { apply (block_other m t d (mkdim (P ++ xs) g)); auto.
      - apply Ht.
      - intros a Ha. simpl. apply in_or_app; auto. }
    destruct (ugidx_uvlen_block m (nth j t dflt) c c' (nth j i 0) Hbo) as [E1 E2].
    rewrite E1, E2. split; auto. specialize (Hb j Hj'). rewrite nth_set_nth_neq in Hb by auto. exact Hb.
Qed.

Lemma usound_slice : forall m t d xs D c i,
  wf_uneven m t -> nth_error t d = Some D -> (forall a, In a xs -> a < length m) -> NoDup xs ->
  split_ok (nprod m xs) (ucsize m D) (gsize D) -> valid m c ->
  uvalid_pos m (set_nth t d (mkdim (axes D ++ xs) (gsize D))) c i ->
  exists c' i', usource m t (DynSlice d xs) (set_nth t d (mkdim (axes D ++ xs) (gsize D))) c i = Some (c', i') /\
    valid m c' /\ uvalid_pos m t c' i' /\
    ugindex m t c' i' = ugindex m (set_nth t d (mkdim (axes D ++ xs) (gsize D))) c i.
Proof.
  intros m t d xs D c i Ht HD HxL Hndx Hok Hc Hi.
  assert (Hm : wf_mesh m) by apply Ht.
  pose proof (wf_uneven_nth m t d _ Ht HD) as [Hg HA].
  assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
  assert (HnD : nth d t dflt = D) by (apply nth_error_nth; auto).
  assert (HN : 0 < nprod m xs) by (apply nprod_pos; auto).
  set (D' := mkdim (axes D ++ xs) (gsize D)).
  set (C := ucsize m D).
  assert (El : ucsize m D' = csize C (nprod m xs)).
  { destruct D as [A g0]. apply ucsize_app; auto. simpl in HA |- *.
    intros a Ha. apply in_app_or in Ha as [Ha|Ha]; auto. }
  apply uvalid_pos_iff in Hi. rewrite set_nth_length in Hi. destruct Hi as [Hlen Hb].
  set (p := nth d i 0).
  assert (Hp : p < ucsize m D' /\ ugidx m D' c p < gsize D).
  { specialize (Hb d Hdl). rewrite nth_set_nth_eq in Hb by auto. apply uvlen_iff in Hb. exact Hb. }
  destruct Hp as [Hp Hv]. rewrite El in Hp.
  assert (Hblk : block m D' c = block m D c * nprod m xs + mr m xs c) by (unfold block, D'; simpl axes; apply mr_app).
  unfold ugidx in Hv. rewrite Hblk, El in Hv.
  assert (Hk : mr m xs c < nprod m xs) by (apply mr_lt; intros; apply Hc; auto).
  destruct (slice_dim (nprod m xs) C (gsize D) (block m D c) (mr m xs c) p HN Hok Hk Hp Hv) as [Hq Heq].
  unfold usource. rewrite nth_set_nth_eq by auto. rewrite HnD. fold D' C. rewrite El. fold p.
  destruct (Nat.ltb_spec (mr m xs c * csize C (nprod m xs) + p) C) as [_|Hf]; [|lia].
  eexists _, _. split; [reflexivity|]. split; [exact Hc|].
  apply assemble; rewrite ?set_nth_length; auto.
  intros j Hj'. destruct (Nat.eq_dec j d) as [->|Hne].
  - rewrite !nth_set_nth_eq by lia. rewrite HnD.
    assert (Hgi : ugidx m D c (mr m xs c * csize C (nprod m xs) + p) = ugidx m D' c p).
    { unfold ugidx. fold C. rewrite Hblk, El, <- Heq. reflexivity. }
    split; [|exact Hgi].
    apply uvlen_iff. fold C. rewrite Hgi. split; [exact Hq|].
    unfold ugidx. rewrite Hblk, El. exact Hv.
  - rewrite !nth_set_nth_neq by auto. split; auto.
    specialize (Hb j Hj'). rewrite nth_set_nth_neq in Hb by auto. exact Hb.
Qed.

(** A slice never grows the padded buffer: the sliced dimension's block
    size [csize C N] is at most its block size [C] before. *)
Lemma ustep_slice_padded : forall m t d xs t1, wf_uneven m t -> ustep m t (DynSlice d xs) t1 ->
  usize_padded m t1 <= usize_padded m t.
Proof.
  intros m t d xs t1 Ht Hs. assert (Hm : wf_mesh m) by apply Ht.
  remember (DynSlice d xs) as op eqn:Eop.
  destruct Hs as [|d' xs' D HD Hne HxL Hnd Hun Hok|]; try discriminate Eop.
  pose proof (wf_uneven_nth m t d' D Ht HD) as HwD. pose proof HwD as [Hg HA].
  assert (HN : 0 < nprod m xs') by (apply nprod_pos; auto).
  assert (HC : 0 < ucsize m D) by (apply csize_pos; auto; apply nprod_pos_dim; auto).
  assert (El : ucsize m (mkdim (axes D ++ xs') (gsize D)) <= ucsize m D).
  { destruct D as [A g0]. rewrite ucsize_app; auto.
    - apply csize_le_g; auto.
    - simpl in HA |- *. intros a Ha. apply in_app_or in Ha as [Ha|Ha]; auto. }
  unfold usize_padded. rewrite map_set_nth.
  pose proof (prod_set_nth (map (ucsize m) t) d' (ucsize m (mkdim (axes D ++ xs') (gsize D))) (ucsize m D))
    as Hp.
  rewrite map_nth_error with (d := D) in Hp by exact HD. specialize (Hp eq_refl). nia.
Qed.

Lemma usound_alltoall : forall m t d e xs P g E c i,
  wf_uneven m t -> d <> e -> nth_error t d = Some (mkdim (P ++ xs) g) -> nth_error t e = Some E ->
  split_ok (nprod m xs) (ucsize m (mkdim P g)) g ->
  split_ok (nprod m xs) (ucsize m E) (gsize E) -> valid m c ->
  let t' := set_nth (set_nth t d (mkdim P g)) e (mkdim (axes E ++ xs) (gsize E)) in
  uvalid_pos m t' c i ->
  exists c' i', usource m t (AllToAll d e xs) t' c i = Some (c', i') /\
    valid m c' /\ uvalid_pos m t c' i' /\ ugindex m t c' i' = ugindex m t' c i.
Proof.
  intros m t d e xs P g E c i Ht Hde HD HE Hokd Hoke Hc t' Hi.
  assert (Hm : wf_mesh m) by apply Ht.
  pose proof (wf_uneven_nth m t d _ Ht HD) as [Hg HA]. simpl in HA.
  pose proof (wf_uneven_nth m t e _ Ht HE) as [HgE HAE].
  assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
  assert (Hel : e < length t) by (apply nth_error_Some; congruence).
  assert (HnD : nth d t dflt = mkdim (P ++ xs) g) by (apply nth_error_nth; auto).
  assert (HnE : nth e t dflt = E) by (apply nth_error_nth; auto).
  assert (Ht'l : length t' = length t) by (unfold t'; rewrite !set_nth_length; auto).
  set (E' := mkdim (axes E ++ xs) (gsize E)).
  assert (Ht'd : nth d t' dflt = mkdim P g).
  { unfold t'. rewrite nth_set_nth_neq by auto. apply nth_set_nth_eq; auto. }
  assert (Ht'e : nth e t' dflt = E').
  { unfold t'. apply nth_set_nth_eq. rewrite set_nth_length. auto. }
  assert (Ht'o : forall j, j <> d -> j <> e -> nth j t' dflt = nth j t dflt).
  { intros j H1 H2. unfold t'. rewrite !nth_set_nth_neq; auto. }
  pose proof (nodup_axes m t d _ Ht HD) as Hnd. simpl in Hnd.
  apply NoDup_app_inv in Hnd. destruct Hnd as [HndP [Hndx Hdisj]].
  assert (HxL : forall a, In a xs -> a < length m) by (intros; apply HA, in_or_app; auto).
  assert (HN : 0 < nprod m xs) by (apply nprod_pos; auto).
  assert (Hnu : NoDup (used t)) by apply Ht.
  assert (Hxd : forall a, In a xs -> In a (axes (mkdim (P ++ xs) g))) by (intros; simpl; apply in_or_app; auto).
  set (C := ucsize m (mkdim P g)). set (CE := ucsize m E).
  assert (El : ucsize m (mkdim (P ++ xs) g) = csize C (nprod m xs)) by (apply ucsize_app; auto).
  assert (ElE : ucsize m E' = csize CE (nprod m xs)).
  { destruct E as [A g0]. apply ucsize_app; auto. simpl in HAE |- *.
    intros a Ha. apply in_app_or in Ha as [Ha|Ha]; auto. }
  apply uvalid_pos_iff in Hi. rewrite Ht'l in Hi. destruct Hi as [Hlen Hb].
  set (p := nth d i 0). set (pe := nth e i 0).
  (* dimension d: the gather part *)
  assert (Hp : p < C /\ ugidx m (mkdim P g) c p < g).
  { specialize (Hb d Hdl). rewrite Ht'd in Hb. apply uvlen_iff in Hb. exact Hb. }
  destruct Hp as [Hp Hv]. unfold ugidx in Hv. fold C in Hv. unfold block in Hv. simpl axes in Hv.
  destruct (gather_dim (nprod m xs) C g (mr m P c) p HN Hokd Hp Hv) as [Hj [Hr Heq]].
  set (c' := set_digits m xs c (p / csize C (nprod m xs))).
  (* dimension e: the slice part *)
  assert (Hpe : pe < ucsize m E' /\ ugidx m E' c pe < gsize E).
  { specialize (Hb e Hel). rewrite Ht'e in Hb. apply uvlen_iff in Hb. exact Hb. }
  destruct Hpe as [Hpe Hve]. rewrite ElE in Hpe.
  assert (HblkE : block m E' c = block m E c * nprod m xs + mr m xs c) by (unfold block, E'; simpl axes; apply mr_app).
  unfold ugidx in Hve. rewrite HblkE, ElE in Hve.
  assert (Hk : mr m xs c < nprod m xs) by (apply mr_lt; intros; apply Hc; auto).
  destruct (slice_dim (nprod m xs) CE (gsize E) (block m E c) (mr m xs c) pe HN Hoke Hk Hpe Hve) as [Hq HeqE].
  assert (HbE' : block m E c' = block m E c).
  { rewrite <- HnE. apply (block_other m t d (mkdim (P ++ xs) g)); auto. }
  unfold usource. rewrite HnD, Ht'e, HnE, El, ElE. fold CE p pe c'.
  destruct (Nat.ltb_spec (mr m xs c * csize CE (nprod m xs) + pe) CE) as [_|Hf]; [|lia].
  eexists _, _. split; [reflexivity|]. split; [apply set_digits_valid; auto|].
  apply assemble; rewrite ?set_nth_length; auto.
  intros j Hj'. destruct (Nat.eq_dec j e) as [->|Hne].
  - rewrite nth_set_nth_eq by (rewrite set_nth_length; lia). rewrite HnE, Ht'e.
    assert (Hgi : ugidx m E c' (mr m xs c * csize CE (nprod m xs) + pe) = ugidx m E' c pe).
    { unfold ugidx. fold CE. rewrite HbE', HblkE, ElE, <- HeqE. reflexivity. }
    split; [|exact Hgi].
    apply uvlen_iff. fold CE. rewrite Hgi. split; [exact Hq|].
    unfold ugidx. rewrite HblkE, ElE. exact Hve.
  - rewrite nth_set_nth_neq by auto. destruct (Nat.eq_dec j d) as [->|Hnd].
    + rewrite nth_set_nth_eq by lia. rewrite HnD, Ht'd.
      assert (Hblk : block m (mkdim (P ++ xs) g) c' = mr m P c * nprod m xs + p / csize C (nprod m xs)).
      { unfold block, c'. simpl axes. rewrite mr_app, set_digits_mr by (auto; intros; apply Hm; auto).
        rewrite (mr_ext m P (set_digits m xs c _) c); auto.
        intros a Ha. apply set_digits_other. apply Hdisj; auto. }
      assert (Hgi : ugidx m (mkdim (P ++ xs) g) c' (p mod csize C (nprod m xs)) = ugidx m (mkdim P g) c p).
      { unfold ugidx. rewrite Hblk, El. fold C. rewrite Heq. reflexivity. }
      split; [|exact Hgi].
      apply uvlen_iff. rewrite El, Hgi. split; [exact Hr|exact Hv].
    + rewrite !nth_set_nth_neq by auto. rewrite Ht'o by auto.
      assert (Hbo : block m (nth j t dflt) c' = block m (nth j t dflt) c)
        by (apply (block_other m t d (mkdim (P ++ xs) g)); auto).
      destruct (ugidx_uvlen_block m (nth j t dflt) c c' (nth j i 0) Hbo) as [E1 E2].
      rewrite E1, E2. split; auto. specialize (Hb j Hj'). rewrite Ht'o in Hb by auto. exact Hb.
Qed.

(** * The theorems *)

(** No padding element ever reaches a valid position: for every step, every
    valid position of every device's output is read from a valid position
    (never padding, never fresh padding) of a real device's input, holding
    the same global index. *)
Theorem usource_sound : forall m t op t' c i,
  wf_uneven m t -> ustep m t op t' -> valid m c -> uvalid_pos m t' c i ->
  exists c' i', usource m t op t' c i = Some (c', i') /\
    valid m c' /\ uvalid_pos m t c' i' /\ ugindex m t c' i' = ugindex m t' c i.
Proof.
  intros m t op t' c i Ht Hs Hc Hi.
  destruct Hs as [d xs P g HD Hxs Hok | d xs D HD Hxs HxL Hnd Hnu Hok
                 | d e xs P g E Hde HD HE Hxs Hokd Hoke].
  - apply usound_gather; auto.
  - apply usound_slice; auto.
  - apply (usound_alltoall m t d e xs P g E c i); auto.
Qed.

(** The chunked convention: every element of every device's output buffer
    comes from an element of a real device's input buffer, with the same
    global index. *)
Theorem usource_sound_chunked : forall m t op t' c i,
  wf_uneven m t -> ustep m t op t' -> valid m c -> urange Chunked m t' c i ->
  exists c' i', usource m t op t' c i = Some (c', i') /\
    valid m c' /\ urange Chunked m t c' i' /\ ugindex m t c' i' = ugindex m t' c i.
Proof.
  intros m t op t' c i Ht Hs Hc Hi. rewrite urange_chunked_valid in Hi.
  destruct (usource_sound m t op t' c i Ht Hs Hc Hi) as [c' [i' [H1 [H2 [H3 H4]]]]].
  exists c', i'. rewrite urange_chunked_valid. auto.
Qed.

Lemma ulocal_valid : forall V (A : list nat -> V) pad m t c i,
  uvalid_pos m t c i -> ulocal A pad m t c i = A (ugindex m t c i).
Proof.
  intros V A pad m t c i H. unfold ulocal. apply uvalid_posb_spec in H. rewrite H. reflexivity.
Qed.

(** Hence, for any global array and any padding value, moving the padded
    distribution gives every valid output position the array's element at
    its global index: the padding value never shows there. *)
Corollary umovement_correct : forall V (A : list nat -> V) pad m t op t' c i,
  wf_uneven m t -> ustep m t op t' -> valid m c -> uvalid_pos m t' c i ->
  match usource m t op t' c i with
  | Some (c', i') => ulocal A pad m t c' i'
  | None => pad
  end = ulocal A pad m t' c i /\ ulocal A pad m t' c i = A (ugindex m t' c i).
Proof.
  intros V A pad m t op t' c i Ht Hs Hc Hi.
  destruct (usource_sound m t op t' c i Ht Hs Hc Hi) as [c' [i' [-> [_ [Hv Hg]]]]].
  rewrite !ulocal_valid by auto. rewrite Hg. auto.
Qed.

(** The collectives only read allocated memory: every position of the padded
    output buffer that is not fresh padding is read from a position of the
    padded input buffer of a real device. *)
Theorem usource_in_buffer : forall m t op t' c i c' i',
  wf_uneven m t -> ustep m t op t' -> valid m c -> urange Padded m t' c i ->
  usource m t op t' c i = Some (c', i') -> valid m c' /\ urange Padded m t c' i'.
Proof.
  intros m t op t' c i c' i' Ht Hs Hc Hi Hso.
  assert (Hm : wf_mesh m) by apply Ht.
  apply urange_iff in Hi. destruct Hi as [Hlen Hb].
  assert (Hlt : length t' = length t).
  { destruct Hs as [d xs P g HD _ _ | d xs D HD _ _ _ _ _ | d e xs P g E _ HD HE _ _ _];
      rewrite ?set_nth_length; auto. }
  rewrite Hlt in Hlen, Hb.
  destruct Hs as [d xs P g HD Hxs Hok | d xs D HD Hxs HxL Hnd Hnu Hok
                 | d e xs P g E Hde HD HE Hxs Hokd Hoke].
  - pose proof (wf_uneven_nth m t d _ Ht HD) as [Hg HA]. simpl in HA.
    assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
    assert (HnD : nth d t dflt = mkdim (P ++ xs) g) by (apply nth_error_nth; auto).
    unfold usource in Hso. rewrite HnD in Hso. injection Hso as <- <-.
    assert (HN : 0 < nprod m xs) by (apply nprod_pos; auto; intros; apply HA, in_or_app; auto).
    assert (El : ucsize m (mkdim (P ++ xs) g) = csize (ucsize m (mkdim P g)) (nprod m xs))
      by (apply ucsize_app; auto).
    split; [apply set_digits_valid; auto|]. apply urange_iff. rewrite set_nth_length. split; auto.
    intros j Hj. specialize (Hb j Hj). destruct (Nat.eq_dec j d) as [->|Hne].
    + rewrite nth_set_nth_eq in * by lia. rewrite HnD. unfold ulen, ubuf in Hb |- *. fold (ucsize m (mkdim P g)) in Hb.
      fold (ucsize m (mkdim (P ++ xs) g)). rewrite El. apply Nat.mod_upper_bound.
      pose proof (csize_pos (ucsize m (mkdim P g)) (nprod m xs)). lia.
    + rewrite nth_set_nth_neq in * by auto. exact Hb.
  - assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
    unfold usource in Hso.
    destruct (_ <? _) eqn:Hq in Hso; [|discriminate]. injection Hso as <- <-. apply Nat.ltb_lt in Hq.
    split; [exact Hc|]. apply urange_iff. rewrite set_nth_length. split; auto.
    intros j Hj. specialize (Hb j Hj). destruct (Nat.eq_dec j d) as [->|Hne].
    + repeat (rewrite nth_set_nth_eq in Hq by (rewrite ?set_nth_length; lia)).
      repeat (rewrite nth_set_nth_eq by (rewrite ?set_nth_length; lia)). exact Hq.
    + rewrite nth_set_nth_neq in * by auto. exact Hb.
  - pose proof (wf_uneven_nth m t d _ Ht HD) as [Hg HA]. simpl in HA.
    assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
    assert (Hel : e < length t) by (apply nth_error_Some; congruence).
    assert (HnD : nth d t dflt = mkdim (P ++ xs) g) by (apply nth_error_nth; auto).
    unfold usource in Hso. rewrite HnD in Hso.
    destruct (_ <? _) eqn:Hq in Hso; [|discriminate]. injection Hso as <- <-. apply Nat.ltb_lt in Hq.
    assert (HN : 0 < nprod m xs) by (apply nprod_pos; auto; intros; apply HA, in_or_app; auto).
    assert (El : ucsize m (mkdim (P ++ xs) g) = csize (ucsize m (mkdim P g)) (nprod m xs))
      by (apply ucsize_app; auto).
    split; [apply set_digits_valid; auto|]. apply urange_iff. rewrite !set_nth_length. split; auto.
    intros j Hj. specialize (Hb j Hj). destruct (Nat.eq_dec j e) as [->|Hne].
    + repeat (rewrite nth_set_nth_eq in Hq by (rewrite ?set_nth_length; lia)).
      repeat (rewrite nth_set_nth_eq by (rewrite ?set_nth_length; lia)). exact Hq.
    + rewrite nth_set_nth_neq in * by auto. destruct (Nat.eq_dec j d) as [->|Hnd].
      * rewrite nth_set_nth_eq in * by lia. rewrite HnD. unfold ulen, ubuf in Hb |- *.
        fold (ucsize m (mkdim P g)) in Hb.
        fold (ucsize m (mkdim (P ++ xs) g)). rewrite El. apply Nat.mod_upper_bound.
        pose proof (csize_pos (ucsize m (mkdim P g)) (nprod m xs)). lia.
      * rewrite !nth_set_nth_neq in * by auto. exact Hb.
Qed.

(** * Typing *)

(** Every rule keeps a type well formed. *)
Theorem ustep_wf : forall m t op t', wf_uneven m t -> ustep m t op t' -> wf_uneven m t'.
Proof.
  intros m t op t' Hwf Hs. pose proof Hwf as [Hm [HF Hnd]].
  destruct Hs as [d xs P g H Hxs Hok|d xs D H Hxs Hr Hnxs Hu Hok|d e xs P g E Hde H HE Hxs Hokd Hoke].
  - pose proof (wf_uneven_nth m t d _ Hwf H) as [Hg Ha]. simpl in Hg, Ha.
    split; [exact Hm|split].
    + apply Forall_set_nth; auto. split; simpl; auto. intros a Hin. apply Ha, in_or_app; auto.
    + pose proof (used_set_nth_perm t d _ (mkdim P g) H) as Hp. simpl in Hp.
      rewrite <- app_assoc in Hp. apply Permutation.Permutation_app_inv_l, Permutation.Permutation_sym in Hp.
      apply (Permutation.Permutation_NoDup Hp) in Hnd. eapply nodup_app_r; eauto.
  - pose proof (wf_uneven_nth m t d _ Hwf H) as [Hg Ha].
    split; [exact Hm|split].
    + apply Forall_set_nth; auto. split; simpl; auto.
      intros a Hin. apply in_app_or in Hin as [Hin|Hin]; auto.
    + pose proof (used_set_nth_perm t d D (mkdim (axes D ++ xs) (gsize D)) H) as Hp. simpl in Hp.
      rewrite <- app_assoc in Hp. apply Permutation.Permutation_app_inv_l, Permutation.Permutation_sym in Hp.
      apply (Permutation.Permutation_NoDup Hp). apply nodup_app_intro; auto.
  - pose proof (wf_uneven_nth m t d _ Hwf H) as [Hg Ha]. simpl in Hg, Ha.
    pose proof (wf_uneven_nth m t e _ Hwf HE) as [HgE HaE].
    set (t1 := set_nth t d (mkdim P g)).
    assert (HE1 : nth_error t1 e = Some E) by (unfold t1; rewrite nth_error_set_nth_neq; auto).
    split; [exact Hm|split].
    + apply Forall_set_nth; [apply Forall_set_nth; auto|].
      * split; simpl; auto. intros a Hin. apply Ha, in_or_app; auto.
      * split; simpl; auto. intros a Hin. apply in_app_or in Hin as [Hin|Hin]; auto.
        apply Ha, in_or_app; auto.
    + pose proof (used_set_nth_perm t d _ (mkdim P g) H) as Hp1. simpl in Hp1. fold t1 in Hp1.
      rewrite <- app_assoc in Hp1. apply Permutation.Permutation_app_inv_l in Hp1.
      pose proof (used_set_nth_perm t1 e E (mkdim (axes E ++ xs) (gsize E)) HE1) as Hp2. simpl in Hp2.
      rewrite <- app_assoc in Hp2. apply Permutation.Permutation_app_inv_l in Hp2.
      apply (Permutation.Permutation_NoDup (Permutation.Permutation_sym (Permutation.perm_trans Hp2 Hp1))).
      exact Hnd.
Qed.

(** * The uneven model extends the even one *)

Lemma wf_dim_prefix : forall m P xs g, wf_mesh m -> wf_dim m (mkdim (P ++ xs) g) -> wf_dim m (mkdim P g).
Proof.
  intros m P xs g Hm [Hg [Ha Hd]]. simpl in *. split; [auto|split].
  - intros a Hin. apply Ha, in_or_app; auto.
  - rewrite nprod_app in Hd. eapply Nat.divide_trans; [apply Nat.divide_factor_l|exact Hd].
Qed.

Lemma split_ok_gather_even : forall m P xs g, wf_mesh m -> wf_dim m (mkdim (P ++ xs) g) ->
  split_ok (nprod m xs) (ucsize m (mkdim P g)) g.
Proof.
  intros m P xs g Hm HD. left. rewrite ucsize_lsize by (auto; eapply wf_dim_prefix; eauto).
  rewrite (lsize_prefix m P xs g Hm HD). apply Nat.divide_factor_r.
Qed.

(** Every even step (other than a permute) is an uneven step. *)
Theorem ustep_of_step : forall m t op t', wf m t -> step m t op t' ->
  (forall t'', op <> AllPermute t'') -> ustep m t op t'.
Proof.
  intros m t op t' Ht Hs Hnp. assert (Hm : wf_mesh m) by apply Ht.
  destruct Hs as [d xs P g H Hxs|d xs D H Hxs Hr Hnd Hu Hdv|d e xs P g E Hde H HE Hxs Hdv|t1 _ _ _].
  - apply ustep_gather; auto. apply split_ok_gather_even; auto. eapply wf_nth; eauto.
  - apply ustep_slice; auto. left. rewrite ucsize_lsize; auto. eapply wf_nth; eauto.
  - apply ustep_alltoall; auto.
    + apply split_ok_gather_even; auto. eapply wf_nth; eauto.
    + left. rewrite ucsize_lsize; auto. eapply wf_nth; eauto.
  - exfalso. apply (Hnp t1). reflexivity.
Qed.

(** On even types the uneven data movement is the spec's ([Semantics.source]):
    it never writes fresh padding and reads where [source] does. *)
Theorem usource_even : forall m t op t' c i, wf m t -> step m t op t' ->
  (forall t'', op <> AllPermute t'') -> valid m c -> in_range m t' i ->
  usource m t op t' c i = Some (source m t op t' c i).
Proof.
  intros m t op t' c i Ht Hs Hnp Hc Hi. assert (Hm : wf_mesh m) by apply Ht.
  assert (Ht' : wf m t') by (eapply step_wf; eauto).
  apply in_range_iff in Hi. destruct Hi as [Hlen Hb].
  destruct Hs as [d xs P g H Hxs|d xs D H Hxs Hr Hnd Hu Hdv|d e xs P g E Hde H HE Hxs Hdv|t1 _ _ _].
  - assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
    unfold usource, source. rewrite ucsize_lsize by (auto; apply wf_nth_dflt; auto). reflexivity.
  - assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
    rewrite set_nth_length in Hb.
    unfold usource, source.
    rewrite (ucsize_lsize m (nth d t dflt)) by (auto; apply wf_nth_dflt; auto).
    rewrite (ucsize_lsize m (nth d _ dflt)) by (auto; apply wf_nth_dflt; auto; rewrite set_nth_length; auto).
    specialize (Hb d Hdl). rewrite nth_set_nth_eq in Hb |- * by auto.
    assert (HnD : nth d t dflt = D) by (apply nth_error_nth; auto). rewrite HnD.
    assert (HwD : wf_dim m D) by exact (wf_nth m t d D Ht H).
    destruct Hdv as [z Hz].
    rewrite (lsize_extend m D xs z Hm HwD Hz) in Hb |- *.
    assert (Hk : mr m xs c < nprod m xs) by (apply mr_lt; intros; apply Hc; auto).
    destruct (Nat.ltb_spec (mr m xs c * z + nth d i 0) (lsize m D)) as [_|Hf]; [reflexivity|].
    exfalso. rewrite Hz in Hf. nia.
  - assert (Hdl : d < length t) by (apply nth_error_Some; congruence).
    assert (Hel : e < length t) by (apply nth_error_Some; congruence).
    rewrite !set_nth_length in Hb.
    unfold usource, source.
    rewrite (ucsize_lsize m (nth d t dflt)) by (auto; apply wf_nth_dflt; auto).
    rewrite (ucsize_lsize m (nth e t dflt)) by (auto; apply wf_nth_dflt; auto).
    rewrite (ucsize_lsize m (nth e _ dflt)) by (auto; apply wf_nth_dflt; auto; rewrite !set_nth_length; auto).
    specialize (Hb e Hel). rewrite nth_set_nth_eq in Hb |- * by (rewrite set_nth_length; auto).
    assert (HnE : nth e t dflt = E) by (apply nth_error_nth; auto). rewrite HnE.
    assert (HwE : wf_dim m E) by exact (wf_nth m t e E Ht HE).
    destruct Hdv as [z Hz].
    rewrite (lsize_extend m E xs z Hm HwE Hz) in Hb |- *.
    pose proof (wf_nth m t d _ Ht H) as [_ [HA _]]. simpl in HA.
    assert (Hk : mr m xs c < nprod m xs) by (apply mr_lt; intros; apply Hc, HA, in_or_app; auto).
    destruct (Nat.ltb_spec (mr m xs c * z + nth e i 0) (lsize m E)) as [_|Hf]; [reflexivity|].
    exfalso. rewrite Hz in Hf. nia.
  - exfalso. apply (Hnp t1). reflexivity.
Qed.
