(** [Puchecker.pucheck]'s reduction figure against the data semantics
    ([Puexchange.pu_reduced], what [Puchecker.puexec_plan] runs first):
    what a device receives from other devices in the reduction is defined
    as the elements of the other members of its pending group that
    [pu_reduced] combines for the device's valid positions ([rreads],
    [rfrom_others]); the reduction's result on a device is determined by
    these and the device's own elements ([pu_reduced_reads]). Every device
    receives exactly [n - 1] elements per valid position it computes,
    [n] the size of its pending group ([rfrom_others_eq]); a reduce-scatter
    gives every device at most the checker's figure, and the device of
    rank 0 exactly that figure ([pucheck_reduce_recv],
    [pucheck_reduce_worst_device]); an all-reduce is proved to do so for
    pending groups of at most two devices: its figure,
    [2 * (s - s / n)], counts a ring all-reduce, which receives partial
    sums, not the [(n - 1) * s] elements the sum combines. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Uneven Unevenproof Uchecker Ucheckerproof Monoid Partial
  Trafficproof Crossmesh Crossmeshproof Exchange Utraffic Utrafficproof Puexchange Puexchangeproof Puchecker Pucheckerproof.
Import ListNotations.

(** The position of the source buffer the reduction reads for position [i]
    of device [c]'s block under the type it leaves: [i] itself for an
    all-reduce, the slice rule's position for a reduce-scatter (none where
    [pu_reduced] writes the unit). *)
Definition red_read (m : mesh) (src : ptype) (st : pustart) (c : coords) (i : list nat) : option (list nat) :=
  match st with
  | PUAllReduce => Some i
  | PUScatter d t1 =>
      match usource m (ptyp src) (DynSlice d (paxes src)) t1 c i with
      | Some (_, i') => Some i'
      | None => None
      end
  end.

(** The other members of [c]'s pending group, by their number on the pending axes. *)
Definition group_others (m : mesh) (P : list nat) (c : coords) : list nat :=
  filter (fun k => negb (k =? mr m P c)) (seq 0 (nprod m P)).

(** What device [c] receives from other devices in the reduction: for every
    valid position of its block under the type the reduction leaves, the
    element, at the position read there, of every other member of its
    pending group (device and position). *)
Definition rreads (m : mesh) (src : ptype) (st : pustart) (c : coords) : list (coords * list nat) :=
  flat_map (fun i =>
              match red_read m src st c i with
              | Some i' => map (fun k => (set_digits m (paxes src) c k, i')) (group_others m (paxes src) c)
              | None => []
              end)
           (uvindices m (pu_mid src st) c).

Definition rfrom_others (m : mesh) (src : ptype) (st : pustart) (c : coords) : nat :=
  length (rreads m src st c).

Lemma filter_keep : forall A (f : A -> bool) l, (forall x, In x l -> f x = true) -> filter f l = l.
Proof.
  intros A f l H. induction l as [|x l IH]; cbn; auto.
  rewrite (H x (or_introl eq_refl)), IH; auto. intros y Hy. apply H. right. exact Hy.
Qed.

Lemma filter_seq_skip : forall j n s, s <= j < s + n ->
  length (filter (fun k => negb (k =? j)) (seq s n)) = n - 1.
Proof.
  intros j n. induction n as [|n IH]; intros s H; [lia|].
  cbn [seq filter]. destruct (Nat.eqb_spec s j) as [<-|Ne].
  - cbn [negb]. rewrite filter_keep; [rewrite seq_length; lia|]. intros k Hk. apply in_seq in Hk.
    destruct (Nat.eqb_spec k s); [lia|reflexivity].
  - cbn [negb length]. rewrite IH; lia.
Qed.

Lemma group_others_length : forall m P c, valid m c -> (forall a, In a P -> a < length m) ->
  length (group_others m P c) = nprod m P - 1.
Proof.
  intros m P c Hc HP. unfold group_others. apply filter_seq_skip.
  pose proof (mr_lt m P c (fun a Ha => Hc a (HP a Ha))). lia.
Qed.

(** Exactly [n - 1] elements per valid position the reduction reads for,
    [n] the size of the pending group. *)
Theorem rfrom_others_eq : forall m src st c, valid m c -> (forall a, In a (paxes src) -> a < length m) ->
  rfrom_others m src st c =
    (nprod m (paxes src) - 1) * length (filter (fun i => match red_read m src st c i with Some _ => true | None => false end)
                                                (uvindices m (pu_mid src st) c)).
Proof.
  intros m src st c Hc HP. unfold rfrom_others, rreads.
  induction (uvindices m (pu_mid src st) c) as [|i l IH]; [cbn; lia|].
  cbn [flat_map filter]. rewrite app_length, IH.
  destruct (red_read m src st c i); cbn [length]; [|lia].
  rewrite map_length, group_others_length by auto. lia.
Qed.

Lemma rfrom_others_le : forall m src st c, valid m c -> (forall a, In a (paxes src) -> a < length m) ->
  rfrom_others m src st c <= (nprod m (paxes src) - 1) * usize Chunked m (pu_mid src st) c.
Proof.
  intros m src st c Hc HP. rewrite rfrom_others_eq by auto. rewrite <- uvindices_length.
  apply Nat.mul_le_mono_l. induction (uvindices m (pu_mid src st) c) as [|i l IH]; cbn; [lia|].
  destruct (red_read m src st c i); cbn; lia.
Qed.

(** What an accepted plan's reduction rests on: the problem is valid and,
    for a reduce-scatter, the slice rule's step to the type it leaves. *)
Lemma pucheck_reduction_facts : forall m src dst p r st rest,
  pucheck m src dst p = Ok r -> pu_reduction m src p = Some (st, rest) ->
  wf_uneven m (ptyp src) /\ NoDup (paxes src) /\ (forall a, In a (paxes src) -> a < length m) /\
  (exists post, pureceived r = pu_red_received m src st ++ post) /\
  (forall d t1, st = PUScatter d t1 -> ustep m (ptyp src) (DynSlice d (paxes src)) t1).
Proof.
  intros m src dst p r st rest H Hr.
  destruct (pucheck_inv m src dst p r H) as [st' [rest' [mid' [es' [r0 [Hv [Hr' [_ [_ [_ Er]]]]]]]]]].
  rewrite Hr in Hr'. injection Hr' as <- <-.
  destruct (puvalidb_spec m src dst Hv) as [[Hws _] [Hs _]].
  apply pending_okb_spec in Hs as [Hnd [HP _]].
  split; [exact Hws|]. split; [exact Hnd|]. split; [exact HP|]. split.
  - eexists. rewrite Er. reflexivity.
  - intros d t1 ->. destruct (pu_reduction_spec m src p _ rest Hr) as [E|[d' [t1' [E Hu]]]]; [discriminate|].
    injection E as <- <-. apply uapply_sound in Hu; auto. inversion Hu; subst. assumption.
Qed.

(** **Traffic of the reduction, partial and uneven**: in a plan [pucheck]
    accepts, the report's received figures start with the reduction's
    ([Puchecker.pu_red_received]: none with nothing pending, else one); a
    reduce-scatter gives every device at most that figure
    ([(n - 1) * usize_padded t1]) of elements from other devices
    ([rfrom_others]: the other members' elements [Puexchange.pu_reduced]
    combines for its valid positions), and an all-reduce does so when the
    pending group has at most two devices (its figure [2 * (s - s / n)]
    counts a ring all-reduce's partial sums; the sum combines
    [(n - 1)] elements per valid position, [rfrom_others_eq]). *)
Theorem pucheck_reduce_recv : forall m src dst p r st rest,
  pucheck m src dst p = Ok r -> pu_reduction m src p = Some (st, rest) ->
  (exists post, pureceived r = pu_red_received m src st ++ post) /\
  forall c, valid m c ->
    match st with PUAllReduce => nprod m (paxes src) <= 2 | PUScatter _ _ => True end ->
    rfrom_others m src st c <= fold_right plus 0 (pu_red_received m src st).
Proof.
  intros m src dst p r st rest H Hr.
  destruct (pucheck_reduction_facts m src dst p r st rest H Hr) as [Hws [Hnd [HP [Hpost Hsc]]]].
  split; [exact Hpost|]. intros c Hc Hn.
  pose proof (rfrom_others_le m src st c Hc HP) as L.
  destruct st as [|d t1]; cbn [pu_red_received pu_mid fold_right] in *.
  - pose proof (usize_chunked_le m (ptyp src) c) as Lc.
    destruct (paxes src) as [|a P] eqn:EP.
    + replace (nprod m []) with 1 in L by reflexivity. cbn [fold_right]. lia.
    + cbn [fold_right]. set (s := usize_padded m (ptyp src)) in *. set (n := nprod m (a :: P)) in *.
      assert (L2 : rfrom_others m src PUAllReduce c <= (n - 1) * s) by (eapply Nat.le_trans; [exact L|]; apply Nat.mul_le_mono_l; exact Lc).
      destruct n as [|[|[|n']]]; [cbn in L2; lia|cbn in L2; lia| |lia].
      pose proof (Nat.div_mod s 2 ltac:(lia)). pose proof (Nat.mod_upper_bound s 2 ltac:(lia)). lia.
  - pose proof (usize_chunked_le m t1 c). rewrite Nat.add_0_r.
    eapply Nat.le_trans; [exact L|]. apply Nat.mul_le_mono_l. assumption.
Qed.

(** **The worst device of the reduction**: in a plan [pucheck] accepts, the
    device of rank 0 (its blocks full) receives [(n - 1)] elements for each
    position of the padded block the reduction leaves; for a reduce-scatter
    that is exactly the checker's figure, so the figure is the most any
    device receives (with [pucheck_reduce_recv]); for an all-reduce it is
    [(n - 1) * s], above the figure [2 * (s - s / n)] when [n >= 4] and
    [s > 0], or [n = 3] and [s >= 3] (the last conjunct). *)
Theorem pucheck_reduce_worst_device : forall m src dst p r st rest,
  pucheck m src dst p = Ok r -> pu_reduction m src p = Some (st, rest) ->
  valid m (coords_of_rank m 0) /\
  rfrom_others m src st (coords_of_rank m 0) = (nprod m (paxes src) - 1) * usize_padded m (pu_mid src st) /\
  (forall d t1, st = PUScatter d t1 -> rfrom_others m src st (coords_of_rank m 0) = fold_right plus 0 (pu_red_received m src st)) /\
  (st = PUAllReduce ->
   (4 <= nprod m (paxes src) /\ 0 < usize_padded m (ptyp src)) \/ (nprod m (paxes src) = 3 /\ 3 <= usize_padded m (ptyp src)) ->
   fold_right plus 0 (pu_red_received m src st) < rfrom_others m src st (coords_of_rank m 0)).
Proof.
  intros m src dst p r st rest H Hr.
  destruct (pucheck_reduction_facts m src dst p r st rest H Hr) as [Hws [Hnd [HP [_ Hsc]]]].
  assert (Hc0 : valid m (coords_of_rank m 0)) by (apply coords_of_rank_valid; apply Hws).
  assert (Hwm : wf_uneven m (pu_mid src st)).
  { destruct st as [|d t1]; [exact Hws|]. apply (ucstep_wf m (ptyp src) (DynSlice d (paxes src))); auto.
    constructor. apply (Hsc d t1); reflexivity. }
  assert (E : rfrom_others m src st (coords_of_rank m 0) = (nprod m (paxes src) - 1) * usize_padded m (pu_mid src st)).
  { rewrite rfrom_others_eq by auto. rewrite filter_keep.
    - rewrite uvindices_length, usize_rank0 by exact Hwm. reflexivity.
    - intros i Hi. apply uvindices_In in Hi. destruct st as [|d t1]; [reflexivity|]. cbn [red_read].
      destruct (usource_sound m (ptyp src) (DynSlice d (paxes src)) t1 (coords_of_rank m 0) i Hws (Hsc d t1 eq_refl) Hc0 Hi)
        as [c' [i' [-> _]]].
      reflexivity. }
  split; [exact Hc0|]. split; [exact E|]. split.
  - intros d t1 ->. rewrite E. cbn [pu_mid pu_red_received fold_right]. lia.
  - intros -> Hn. rewrite E. cbn [pu_mid pu_red_received].
    set (s := usize_padded m (ptyp src)) in *.
    destruct (paxes src) as [|a P] eqn:EP; [replace (nprod m []) with 1 in Hn by reflexivity; lia|].
    cbn [fold_right]. set (n := nprod m (a :: P)) in *. rewrite Nat.add_0_r.
    destruct Hn as [[Hn Hs]|[Hn Hs]].
    + pose proof (Nat.div_le_upper_bound s n s ltac:(lia) ltac:(nia)).
      assert (3 * s <= (n - 1) * s) by (apply Nat.mul_le_mono_r; lia). lia.
    + rewrite Hn. pose proof (Nat.div_le_lower_bound s 3 1 ltac:(lia) ltac:(lia)).
      pose proof (Nat.div_le_upper_bound s 3 s ltac:(lia) ltac:(lia)). lia.
Qed.

(** The group sum [pu_reduced] takes for a position it reads [i'] at is
    determined by the device's own buffer and its [rreads]. *)
Lemma gsum_reads : forall M m src st (x x' : coords -> list nat -> carrier M) c i i',
  wf_mesh m -> NoDup (paxes src) -> (forall a, In a (paxes src) -> a < length m) -> valid m c ->
  uvalid_pos m (pu_mid src st) c i -> red_read m src st c i = Some i' ->
  (forall c', (forall a, c' a = c a) -> x c' = x' c') ->
  (forall c' j, In (c', j) (rreads m src st c) -> x c' j = x' c' j) ->
  gsum M m (paxes src) (fun c' => x c' i') c = gsum M m (paxes src) (fun c' => x' c' i') c.
Proof.
  intros M m src st x x' c i i' Hm Hnd HP Hc Hi Er Hown Hr. unfold gsum. apply msum_ext.
  intros k Hk. destruct (Nat.eqb_spec k (mr m (paxes src) c)) as [->|Ne].
  - rewrite (Hown (set_digits m (paxes src) c (mr m (paxes src) c))); auto.
    apply Permute.set_digits_self; auto.
  - apply Hr. unfold rreads. apply in_flat_map. exists i. split; [apply uvindices_In; exact Hi|].
    rewrite Er. apply in_map_iff. exists k. split; [reflexivity|].
    unfold group_others. apply filter_In. split; [exact Hk|]. apply negb_true_iff, Nat.eqb_neq. exact Ne.
Qed.

(** **What the reduction receives suffices**: [rreads] is what a device
    needs from other devices: two sets of local arrays that agree on the
    device's own buffer and on its [rreads] give it the same result of
    [Puexchange.pu_reduced] at every valid position of its block under the
    type the reduction leaves. *)
Theorem pu_reduced_reads : forall M m src st (x x' : coords -> list nat -> carrier M) c i,
  wf_mesh m -> NoDup (paxes src) -> (forall a, In a (paxes src) -> a < length m) -> valid m c ->
  uvalid_pos m (pu_mid src st) c i ->
  (forall c', (forall a, c' a = c a) -> x c' = x' c') ->
  (forall c' j, In (c', j) (rreads m src st c) -> x c' j = x' c' j) ->
  pu_reduced M m src st x c i = pu_reduced M m src st x' c i.
Proof.
  intros M m src st x x' c i Hm Hnd HP Hc Hi Hown Hr. unfold pu_reduced. destruct st as [|d t1].
  - apply (gsum_reads M m src PUAllReduce x x' c i i); auto.
  - destruct (usource m (ptyp src) (DynSlice d (paxes src)) t1 c i) as [[c0 i']|] eqn:Es; [|reflexivity].
    apply (gsum_reads M m src (PUScatter d t1) x x' c i i'); auto.
    cbn [red_read]. rewrite Es. reflexivity.
Qed.
